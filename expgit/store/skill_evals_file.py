"""A skill's ``evals/evals.json``, the Agent Skills format of its test cases, read from a
commit's tree (never the working tree): ``{skill_name, evals: [{id, prompt,
expected_output, files, assertions}]}`` (agentskills.io's guide to evaluating skills;
skill-creator names ``assertions`` ``expectations``: both are read).

* ``skill_name``, ``evals``, and each eval's ``id``, ``prompt`` and ``expected_output``
  are required; ``files`` and ``assertions`` default to none. Other keys (a viewer's
  ``eval_name``) are kept out of the way, not refused.
* An assertion is a string (a statement, see :mod:`expgit.train.measurement.skill_evals` for what
  becomes a check) or an object ``{type: ..., ...}``, one of expgit's rubric checks.
* ``files`` are paths relative to the skill folder (``evals/files/x.csv``). A path that
  is absolute, holds ``..`` or ``.``, names a symlink, a folder or a submodule, is not
  UTF-8 text, or is over ``[skills] max_file_bytes`` is refused.

Every problem is an :class:`InvalidInputError` (exit 5) naming the file and the case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from expgit.core.jsonl import loads_untrusted
from expgit.errors import InvalidInputError, NotFoundError
from expgit.git.objects import SYMLINK_MODE, serialise_tree
from expgit.store.derived.snapshot import Snapshot
from expgit.store.repository import ExperienceRepository

EVALS_FILE = "evals/evals.json"
MAX_EVALS_BYTES = 1024 * 1024  # an evals.json past this is refused unread


class SkillEval(BaseModel):
    """One case of a skill's evals."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: int | str
    prompt: str = Field(min_length=1)
    expected_output: str
    files: list[str] = Field(default_factory=list)
    assertions: list[str | dict[str, Any]] = Field(
        default_factory=list, validation_alias=AliasChoices("assertions", "expectations"))


class EvalsFile(BaseModel):
    model_config = ConfigDict(extra="ignore")

    skill_name: str
    evals: list[dict[str, Any]]  # each checked on its own, to name the case


@dataclass(frozen=True)
class SkillEvals:
    """A skill's evals read from ``commit``: where the file is, its cases, and the text
    of each case's files by path (relative to the skill folder)."""

    skill: str
    path: str  # the repository path of evals.json
    commit: str
    evals: list[SkillEval]
    files: dict[str, str]


def _problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "top level"
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def evals_path(repo: ExperienceRepository, skill: str) -> str:
    return f"{repo.layout.unit_of(skill)}/{EVALS_FILE}"


def has_evals(repo: ExperienceRepository, commit: str, skill: str) -> bool:
    """Whether ``skill`` has an ``evals/evals.json`` at ``commit`` (skills layout only)."""
    if not repo.layout.skills:
        return False
    tree = repo.git.read_commit(commit).tree
    entry = repo.git.path_entry(tree, evals_path(repo, skill))
    return entry is not None and not entry.is_tree


def _blob(repo: ExperienceRepository, tree: str, path: str, limit: int, what: str) -> str:
    entry = repo.git.path_entry(tree, path)
    if entry is None:
        raise InvalidInputError(f"{what}: no such file {path!r}")
    if entry.is_tree or entry.mode == SYMLINK_MODE or not entry.mode.startswith("100"):
        raise InvalidInputError(f"{what}: {path!r} is not a regular file")
    data = repo.git.read_blob(entry.sha)
    if len(data) > limit:
        raise InvalidInputError(f"{what}: {path!r} is over {limit} bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{what}: {path!r} is not UTF-8 text (byte {exc.start})"
                                ) from None


def inside_folder(relative: str) -> bool:
    """Whether a path relative to a skill folder stays inside it (no absolute path, no
    ``..``, ``.`` or empty part, no backslash)."""
    return bool(relative) and "\\" not in relative and all(
        part not in ("", ".", "..") for part in relative.split("/"))


def read_skill_evals(repo: ExperienceRepository, skill: str, commit: str) -> SkillEvals:
    """``skill``'s evals at ``commit``; NotFoundError when it has none, InvalidInputError
    (naming the file and the case) when they are malformed."""
    if not repo.layout.skills:
        raise InvalidInputError(f"skill evals need the skills layout (`layout = \"skills\"` "
                                f"in expgit.toml); {skill!r} is a flat experience")
    path = evals_path(repo, skill)
    tree = repo.git.read_commit(commit).tree
    folder = repo.layout.unit_of(skill)
    if repo.git.path_entry(tree, folder) is None:
        raise NotFoundError(f"no skill {skill!r} at {commit[:12]}")
    if repo.git.path_entry(tree, path) is None:
        raise NotFoundError(f"skill {skill!r} has no {EVALS_FILE}",
                            hint=f"write its cases to {path}: docs/skill-evals.md")
    text = _blob(repo, tree, path, MAX_EVALS_BYTES, path)
    try:
        raw = loads_untrusted(text)
    except ValueError as exc:
        raise InvalidInputError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{path}: the top level must be an object "
                                "{skill_name, evals: [...]}")
    try:
        head = EvalsFile.model_validate(raw)
    except ValidationError as exc:
        raise InvalidInputError(f"{path}: {_problem(exc)}") from None
    if head.skill_name != skill:
        raise InvalidInputError(f"{path}: skill_name {head.skill_name!r} is not the "
                                f"skill's name {skill!r}")
    if not head.evals:
        raise InvalidInputError(f"{path}: evals: no cases")
    evals: list[SkillEval] = []
    files: dict[str, str] = {}
    seen: set[str] = set()
    limit = repo.settings.skills.max_file_bytes
    for index, item in enumerate(head.evals):
        label = f"{path}: case {index}" + (f" (id {item['id']!r})" if isinstance(
            item, dict) and isinstance(item.get("id"), int | str) else "")
        try:
            case = SkillEval.model_validate(item)
        except ValidationError as exc:
            raise InvalidInputError(f"{label}: {_problem(exc)}") from None
        if str(case.id) in seen:
            raise InvalidInputError(f"{label}: duplicate id {case.id!r}")
        seen.add(str(case.id))
        for name in case.files:
            if not inside_folder(name):
                raise InvalidInputError(f"{label}: files: {name!r} reaches outside the "
                                        f"skill folder {folder}/",
                                        hint="give paths relative to the skill folder, "
                                        "e.g. evals/files/input.csv")
            if name not in files:
                files[name] = _blob(repo, tree, f"{folder}/{name}", limit, f"{label}: files")
        evals.append(case)
    return SkillEvals(skill, path, commit, evals, files)


def without_skill(repo: ExperienceRepository, snapshot: Snapshot, skill: str) -> Snapshot:
    """``snapshot`` with ``skill`` left out, in memory (nothing is written): its id is the
    id the experiences root's tree would have without the skill's folder."""
    if skill not in snapshot:
        raise NotFoundError(f"no skill {skill!r} at {snapshot.commit[:12]}")
    entries = [e for e in repo.git.read_tree(snapshot.id) if e.name != skill]
    tree_id = repo.git.out("hash-object", "-t", "tree", "--stdin",
                           input=serialise_tree(entries)).strip()
    return Snapshot(snapshot.commit, tree_id, snapshot.root,
                    {n: e for n, e in snapshot.entries.items() if n != skill},
                    list(snapshot.strays))
