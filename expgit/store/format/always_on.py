"""The always-on block of ``AGENTS.md``: the skills marked ``expgit-always: "true"``
(active ones), written between two marker lines that expgit owns.

In the skills layout every tree expgit commits (a gradient, a proposal, an apply rebuilt
on a moved ``main``, a revert, ``init``) is made by :func:`experience_tree`, which
regenerates the block of each file of ``[skills] always_on_files`` (default
``AGENTS.md``, at the repository's root) from the skills of that very tree, so the block
changes in the same commit as the skills that alter it. ``expgit export`` writes the same
block into another folder (:func:`splice`).

Rules, each refused with :class:`~expgit.errors.InvalidInputError` (exit 5) naming the
file, before anything is written:

* text outside the block keeps its bytes; a file with no block gets it appended (a file
  is created only when there is a skill to put in it);
* a file with one marker line only, or two blocks, or the end before the start, is
  damaged: refused, never guessed at;
* the file must stay within :data:`MAX_BYTES` (32 KiB, where Codex stops reading
  ``AGENTS.md``): a change that would make it larger than that is refused;
* a symlink or a folder at that path is not written through.

The block's text is rendered from ``templates/always_on.md.j2`` (overridable under
``.expgit/templates/`` in the same tree, like every template).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from expgit.errors import InvalidInputError
from expgit.git.objects import GITLINK_MODE, SYMLINK_MODE
from expgit.store.format import templates
from expgit.store.format.experience import check_experience, decode_experience
from expgit.store.repository import ExperienceRepository

START = "<!-- expgit:always-on:start -->"
END = "<!-- expgit:always-on:end -->"
MAX_BYTES = 32 * 1024  # Codex's project_doc_max_bytes: it stops reading AGENTS.md there
TEMPLATE = "always_on.md.j2"


@dataclass(frozen=True)
class AlwaysOnSkill:
    name: str
    description: str
    body: str
    path: str


def always_on_skills(repo: ExperienceRepository, tree: str) -> list[AlwaysOnSkill]:
    """The active skills marked always-on in the commit tree ``tree``, by name. A skill
    that does not parse is left out (``validate`` names it)."""
    if not repo.layout.skills:
        return []
    entry = repo.git.path_entry(tree, repo.root)
    if entry is None or not entry.is_tree:
        return []
    found = []
    for name, (path, data) in sorted(repo.snapshots.contents_of_tree(entry.sha).items()):
        try:
            exp = check_experience(decode_experience(data, path), path, name,
                                   repo.settings.token_budget)
        except InvalidInputError:
            continue
        if exp.front_matter.always and exp.status == "active":
            found.append(AlwaysOnSkill(name, exp.front_matter.summary, exp.body, path))
    return found


def render_block(repo: ExperienceRepository, skills: list[AlwaysOnSkill],
                 templates_tree: str | None = None) -> bytes:
    """The whole block, marker lines included, ending with a newline."""
    for skill in skills:
        if START in skill.body or END in skill.body or START in skill.description \
                or END in skill.description:
            raise InvalidInputError(f"{skill.path}: holds an always-on marker line, which "
                                    "would end expgit's block in AGENTS.md early")
    text = templates.render(TEMPLATE, repo, templates_tree=templates_tree,
                            skills=skills, root=repo.root).strip("\n")
    if START in text or END in text:
        raise InvalidInputError(f"template {TEMPLATE}: renders a marker line of the "
                                "always-on block")
    return f"{START}\n{text}\n{END}\n".encode() if text else f"{START}\n{END}\n".encode()


def splice(current: bytes | None, block: bytes, path: str) -> bytes:
    """``current`` (None: no file) with its block replaced by ``block``, or ``block``
    appended when it has none; every byte outside the block kept."""
    if not current:
        return block
    lines = current.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == START.encode()]
    ends = [i for i, line in enumerate(lines) if line.strip() == END.encode()]
    if not starts and not ends:
        return current + (b"\n" if current.endswith(b"\n") else b"\n\n") + block
    if len(starts) != 1 or len(ends) != 1 or starts[0] > ends[0]:
        raise InvalidInputError(
            f"{path}: the always-on block is damaged ({len(starts)} start and {len(ends)} "
            f"end marker lines)",
            hint=f"keep exactly one '{START}' line and one '{END}' line after it, or "
                 "remove both and expgit appends the block anew")
    return b"".join(lines[:starts[0]]) + block + b"".join(lines[ends[0] + 1:])


def check_size(old: bytes | None, new: bytes, path: str) -> None:
    """Refuse a change that makes the file larger than :data:`MAX_BYTES`."""
    if len(new) > MAX_BYTES and len(new) > len(old or b""):
        raise InvalidInputError(
            f"{path}: would be {len(new)} bytes with the always-on block, over the "
            f"{MAX_BYTES} bytes (32 KiB) at which Codex stops reading it",
            hint="shorten the always-on skills, or set expgit-always to \"false\" on some "
                 "(they stay skills the agent loads when relevant)")


def _regular(repo: ExperienceRepository, tree: str, path: str) -> bytes | None:
    """The bytes of the file ``path`` in ``tree``; None when there is none."""
    entry = repo.git.path_entry(tree, path)
    if entry is None:
        return None
    if entry.is_tree or entry.mode in (SYMLINK_MODE, GITLINK_MODE):
        raise InvalidInputError(f"{path}: not a regular file; expgit writes the always-on "
                                "block only into a file of its own",
                                hint="replace it by a file, or change [skills] "
                                     "always_on_files")
    return repo.git.read_blob(entry.sha)


def planned(repo: ExperienceRepository, tree: str) -> dict[str, bytes]:
    """``{path: new bytes}`` of the always-on files that differ from what ``tree``
    holds; raises InvalidInputError for a damaged block or a file grown too large."""
    if not repo.layout.skills or not repo.settings.skills.always_on_files:
        return {}
    skills = always_on_skills(repo, tree)
    block: bytes | None = None
    found: dict[str, bytes] = {}
    for path in repo.settings.skills.always_on_files:
        current = _regular(repo, tree, path)
        if not skills and (current is None or START.encode() not in current):
            if current is not None and END.encode() in current:
                splice(current, b"", path)  # one marker alone: damaged
            continue  # nothing to write, and no block to empty
        if block is None:
            block = render_block(repo, skills, tree)
        new = splice(current, block, path)
        if new != current:
            check_size(current, new, path)
            found[path] = new
    return found


def with_always_on(repo: ExperienceRepository, tree: str) -> str:
    """``tree`` with its always-on files regenerated."""
    edits = planned(repo, tree)
    if not edits:
        return tree
    return repo.git.edit_tree(tree, {p: repo.git.write_blob(d) for p, d in edits.items()})


def experience_tree(repo: ExperienceRepository, base: str | None,
                    edits: Mapping[str, str | None]) -> str:
    """The one way expgit builds a tree to commit: ``base`` with ``edits`` (path: blob,
    or None to remove), and the always-on files regenerated from the result."""
    return with_always_on(repo, repo.git.edit_tree(base, edits))


def stale_files(repo: ExperienceRepository, commit: str) -> list[str]:
    """Problems of the always-on files at ``commit``: a block out of date with the
    skills there, or a file expgit could not write."""
    tree = repo.git.read_commit(commit).tree
    try:
        edits = planned(repo, tree)
    except InvalidInputError as exc:
        return [exc.message]
    return [f"{path}: the always-on block is out of date with the skills at {commit[:12]} "
            "(the next expgit apply or revert rewrites it)" for path in edits]
