"""``expgit migrate --to skills``: move a flat repository to the skills layout, as one
proposal that is reviewed, applied and reverted like any other.

In one commit on its own ``expgit/proposals/<id>`` branch, planned on ``main``:

* every ``<old root>/<name>.md`` becomes ``<root>/<name>/SKILL.md`` (root ``skills`` unless
  given); ``summary`` becomes ``description``; ``status``, ``tags`` and ``always`` go into
  ``metadata`` as ``expgit-status``, ``expgit-tags`` (comma-separated) and
  ``expgit-always``, and the other ``metadata`` keys are kept, each value a string (the
  codec is :mod:`expgit.store.format.skill_md`); the body keeps its bytes;
* an experience with an empty ``summary`` gets the first line of its body that holds
  text (a heading's ``#`` marks removed) as its description, and the description says
  so, so the reviewer sees every description the migration made up; a body with no text
  line is refused;
* ``expgit.toml`` gets ``layout = "skills"`` and the new ``experiences_root``, its other
  lines kept;
* the message carries ``Expgit-Migrated-From`` and ``Expgit-Migrated-To``: versions and
  ``log NAME`` follow each name across the move (:mod:`expgit.store.format.moves`).

An experience that cannot become a valid skill (a name with "claude" or "anthropic" or
longer than 64 characters, a description past 1,024 characters, a tag with a comma, a
metadata value that is not a scalar, ...) stops the migration: InvalidInputError naming
the file, and no ref is written. A repository already in the skills layout has nothing
to migrate (:data:`ALREADY`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from expgit.errors import InvalidInputError, ValidationError
from expgit.git.repo import RefUpdate
from expgit.store.derived.applied import NOTHING_APPLIED
from expgit.store.format import skill_check
from expgit.store.format import trailers as tr
from expgit.store.format.always_on import experience_tree
from expgit.store.format.experience import Experience, FrontMatter, check_experience
from expgit.store.format.layout import Layout
from expgit.store.format.settings import SETTINGS_FILE, Settings, parse_settings
from expgit.store.format.skill_md import ALWAYS, STATUS, TAGS, check_skill_name
from expgit.store.refnames import ID_LEN, PROPOSALS
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.proposals import Proposal, load_proposal

DEFAULT_ROOT = "skills"
ALREADY = "already in the skills layout; nothing to migrate"
_TOP_KEY = re.compile(r"\s*(experiences_root|layout)\s*=")


@dataclass(frozen=True)
class MovedExperience:
    name: str
    old_path: str
    new_path: str
    text: str
    derived_description: bool  # the summary was empty: made from the body


def _description(exp: Experience, path: str) -> tuple[str, bool]:
    """The skill's description: the summary, or the body's first text line."""
    if exp.front_matter.summary.strip():
        return exp.front_matter.summary, False
    for line in exp.body.splitlines():
        text = " ".join(line.strip().lstrip("#").split())
        if text:
            return text, True
    raise InvalidInputError(f"{path}: summary is empty and the body has no text to "
                            "describe the skill with",
                            hint="write a summary (what it does and when to use it)")


def _metadata_value(value: Any, key: str, path: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise InvalidInputError(f"{path}: metadata.{key} is not a single value; Agent Skills "
                            "metadata maps strings to strings")


def skill_text(exp: Experience, path: str) -> tuple[str, bool]:
    """The SKILL.md text of a flat experience (read from ``path``), and whether its
    description was derived from the body; raises InvalidInputError naming ``path``."""
    fm = exp.front_matter
    check_skill_name(fm.name, path)
    description, derived = _description(exp, path)
    if any("," in t for t in fm.tags):
        raise InvalidInputError(f"{path}: a tag contains a comma, which "
                                f"metadata.{TAGS} (comma-separated) cannot hold")
    metadata: dict[str, object] = {}
    for key, value in fm.metadata.items():
        if str(key) in (STATUS, TAGS, ALWAYS):
            raise InvalidInputError(f"{path}: metadata.{key} would clash with expgit's "
                                    "own field of that name")
        metadata[str(key)] = _metadata_value(value, str(key), path)
    skill = FrontMatter(name=fm.name, status=fm.status, summary=description, tags=fm.tags,
                        always=fm.always, metadata=metadata)
    body = exp.body
    return Experience(front_matter=skill, body=body, spec_fields={}).render(), derived


def _settings_text(text: str, root: str) -> str:
    """``expgit.toml`` with ``experiences_root`` and ``layout`` set, other lines kept."""
    lines = text.splitlines(keepends=True)
    end = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("[")), len(lines))
    top = [i for i in range(end) if _TOP_KEY.match(lines[i])]
    at = top[0] if top else end
    new = f"experiences_root = {json.dumps(root)}\nlayout = \"skills\"\n"
    kept = [ln for i, ln in enumerate(lines) if i not in top]
    if kept[:at] and not kept[at - 1].endswith("\n"):
        kept[at - 1] += "\n"
    return "".join(kept[:at]) + new + "".join(kept[at:])


def _nested(one: str, other: str) -> bool:
    return one != other and (one.startswith(other + "/") or other.startswith(one + "/"))


def plan_migration(repo: ExperienceRepository, root: str
                   ) -> tuple[list[MovedExperience], str, Settings]:
    """What the migration writes: the moved experiences, the new ``expgit.toml`` text and
    the settings it holds; raises InvalidInputError, writing nothing."""
    main = repo.main_commit()
    entry = repo.git.path_entry(repo.git.read_commit(main).tree, SETTINGS_FILE)
    if entry is None or entry.is_tree:
        raise InvalidInputError(f"{SETTINGS_FILE} is not committed on "
                                f"{repo.settings.main_branch}")
    text = _settings_text(repo.git.read_blob(entry.sha).decode("utf-8", "replace"), root)
    settings = parse_settings(text, f"{SETTINGS_FILE} with --root {root!r}")
    new_root = settings.experiences_root
    if _nested(new_root, repo.root):
        raise InvalidInputError(f"--root {new_root!r} is inside {repo.root}/ or holds it",
                                hint=f"choose a folder apart, or {repo.root} itself")
    if new_root != repo.root and repo.git.path_entry(
            repo.git.read_commit(main).tree, new_root) is not None:
        raise InvalidInputError(f"{new_root}: already exists on {repo.settings.main_branch}",
                                hint="choose another folder with --root")
    target = Layout("skills", new_root)
    moved = []
    for entry_ in repo.snapshot(main).entries.values():
        new_path = target.path_of(entry_.name)
        skill, derived = skill_text(entry_.experience, entry_.path)
        try:
            check_experience(skill, new_path, entry_.name, settings.token_budget)
        except InvalidInputError as exc:
            raise InvalidInputError(f"{entry_.path}: as {new_path}: {exc.message}",
                                    hint=exc.hint) from None
        moved.append(MovedExperience(entry_.name, entry_.path, new_path, skill, derived))
    return sorted(moved, key=lambda m: m.name), text, settings


def _description_text(repo: ExperienceRepository, moved: list[MovedExperience],
                      new_root: str) -> str:
    rows = "\n".join(f"| `{m.name}` | `{m.old_path}` | `{m.new_path}` |" for m in moved)
    derived = [m for m in moved if m.derived_description]
    made_up = ("\n\nThese had an empty `summary`; their `description` is the first text "
               "line of the body. Check that it says what the skill does and when to "
               "use it:\n\n" + "\n".join(f"- `{m.name}`" for m in derived)) if derived else ""
    return (
        f"Moves {len(moved)} experience{'s' if len(moved) != 1 else ''} from the flat "
        f"layout (`{repo.root}/<name>.md`) to Agent Skills folders "
        f"(`{new_root}/<name>/SKILL.md`), and sets `layout = \"skills\"` and "
        f"`experiences_root = \"{new_root}\"` in `{SETTINGS_FILE}`.\n\n"
        "Front matter: `summary` becomes `description`; `status`, `tags` and `always` "
        f"become `metadata.{STATUS}`, `metadata.{TAGS}` (comma-separated) and "
        f"`metadata.{ALWAYS}`; other `metadata` keys are kept. Bodies keep their bytes. "
        "Versions and `expgit log NAME` go on from before the move; `expgit revert` of "
        "the applied commit restores the flat layout.\n\n"
        "| experience | from | to |\n|---|---|---|\n" + rows + made_up + "\n")


def migrate_to_skills(repo: ExperienceRepository, root: str | None = None
                      ) -> Proposal | None:
    """Make the migration proposal; None when the repository already is in the skills
    layout (nothing is written). Raises InvalidInputError (nothing written) when an
    experience cannot become a valid skill."""
    if repo.layout.skills:
        return None
    moved, settings_text, settings = plan_migration(repo, root or DEFAULT_ROOT)
    main = repo.main_commit()
    edits: dict[str, str | None] = {m.old_path: None for m in moved}
    edits |= {m.new_path: repo.git.write_blob(m.text.encode()) for m in moved}
    edits[SETTINGS_FILE] = repo.git.write_blob(settings_text.encode())
    # the always-on block as the migrated settings see it: in the same commit
    tree = experience_tree(ExperienceRepository(repo.git, settings),
                           repo.git.read_commit(main).tree, edits)
    new_root = settings.experiences_root
    count = len(moved)
    message = tr.Message(
        f"expgit: migrate {count} experience{'s' if count != 1 else ''} to the skills "
        f"layout ({new_root}/)", _description_text(repo, moved, new_root),
        ((tr.MIGRATED_FROM, repo.root), (tr.MIGRATED_TO, new_root)))
    commit = repo.git.write_commit(tree, [main], message.render())
    problems = skill_check.validate_commit(ExperienceRepository(repo.git, settings), commit)
    if problems:
        raise ValidationError(problems, hint="fix these on main and migrate again")
    ref = PROPOSALS + commit[:ID_LEN]
    if repo.git.ref(ref) != commit:
        repo.git.update_refs([RefUpdate(ref, commit, None)], "expgit migrate")
    return load_proposal(repo, commit, "open", NOTHING_APPLIED)
