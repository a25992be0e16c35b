"""Layout moves in history: the commits that moved experiences from a flat root to a
skills root (``expgit migrate --to skills``), and what each maps.

A move commit carries ``Expgit-Migrated-From: <flat root>`` and ``Expgit-Migrated-To:
<skills root>``; in it ``<from>/<name>.md`` became ``<to>/<name>/SKILL.md``. Versions
(:mod:`expgit.store.derived.snapshot`), ``log NAME`` and ``show --version`` follow a name across
it, as ``git log --follow`` follows a rename, but by the mapping the commit states rather
than by similarity: a short experience whose front matter is most of the file is still
the same experience after the move.

Also here: the layout a commit's own ``expgit.toml`` names (:func:`layout_at`), which
differs from ``main``'s for a commit from before a move.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from expgit.errors import InvalidInputError
from expgit.git.repo import GitRepo
from expgit.store.format import trailers as tr
from expgit.store.format.layout import SKILL_FILE, Layout
from expgit.store.format.settings import SETTINGS_FILE, parse_settings


@dataclass(frozen=True)
class Move:
    commit: str
    from_root: str  # flat
    to_root: str  # skills

    def old_path(self, name: str) -> str:
        return f"{self.from_root}/{name}.md"

    def new_path(self, name: str) -> str:
        return f"{self.to_root}/{name}/{SKILL_FILE}"

    def moved_name(self, new_path: str) -> str | None:
        """The name whose new file ``new_path`` is, or None."""
        return Layout("skills", self.to_root).name_of(new_path)


def move_of(commit: str, message: str) -> Move | None:
    """The move a commit message states, or None."""
    msg = tr.parse_message(message)
    source, target = msg.value(tr.MIGRATED_FROM), msg.value(tr.MIGRATED_TO)
    if not source or not target:
        return None
    return Move(commit, source.strip().strip("/"), target.strip().strip("/"))


def moves_in(git: GitRepo, revs: list[str]) -> dict[str, Move]:
    """``{commit: move}`` of the move commits of ``git log REVS`` (one ``git log``)."""
    text = git.out("log", "-z", "--format=%H%n%B", "-i",
                   f"--grep=^{tr.MIGRATED_FROM}:", *revs, "--")
    found = {}
    for record in text.split("\0"):
        sha, _, body = record.strip("\n").partition("\n")
        move = move_of(sha, body) if sha else None
        if move is not None:
            found[sha] = move
    return found


def moves_among(git: GitRepo, commits: Iterable[str]) -> dict[str, Move]:
    """``{commit: move}`` of those of ``commits`` that are move commits (a few: their
    messages are read)."""
    return {sha: m for sha in commits
            if (m := move_of(sha, git.read_commit(sha).message)) is not None}


class _Versioned(Protocol):
    @property
    def version(self) -> int: ...


V = TypeVar("V", bound=_Versioned)


def carry_over(versions: dict[str, V], move: Move, paths: Iterable[str],
               before: Mapping[str, V]) -> None:
    """Before a move commit is counted: each moved experience's new file (of ``paths``,
    what the commit changed) takes the versions its old file had in ``before`` (the
    versions of the move's parent under its old root), unless it has more already."""
    for path in paths:
        name = move.moved_name(path)
        old = before.get(move.old_path(name)) if name is not None else None
        mine = versions.get(path)
        if old is not None and (mine is None or mine.version < old.version):
            versions[path] = old


_LAYOUTS: dict[str, Layout | None] = {}


def layout_at(git: GitRepo, commit: str | None, default: Layout) -> Layout:
    """The layout the ``expgit.toml`` of ``commit`` names; ``default`` when it has none
    or it cannot be read."""
    if commit is None:
        return default
    entry = git.path_entry(git.read_commit(commit).tree, SETTINGS_FILE)
    if entry is None or entry.is_tree:
        return default
    if entry.sha not in _LAYOUTS:
        try:
            settings = parse_settings(git.read_blob(entry.sha).decode("utf-8", "replace"))
            _LAYOUTS[entry.sha] = Layout(settings.layout, settings.experiences_root)
        except InvalidInputError:
            _LAYOUTS[entry.sha] = None
        if len(_LAYOUTS) > 256:
            _LAYOUTS.pop(next(iter(_LAYOUTS)))
    return _LAYOUTS[entry.sha] or default


def settings_blob(git: GitRepo, commit: str | None) -> str | None:
    if commit is None:
        return None
    entry = git.path_entry(git.read_commit(commit).tree, SETTINGS_FILE)
    return entry.sha if entry is not None and not entry.is_tree else None
