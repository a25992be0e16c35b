"""Refs of git's ``files`` backend, read without a process; the record of a ref move.

A ref is a loose file under the common git dir (``refs/heads/main``) or, failing that, a
line of ``packed-refs``: loose first, then packed, as git reads them. git replaces both
atomically (a new file renamed into place), so a read sees the old or the new value,
never a mix. A loose ref may be symbolic (``ref: refs/heads/other``); it is followed as
deep as git follows it.

Only shared refs with plain names are read here; anything else (``HEAD``, per-worktree
refs, revision expressions, another ref backend, a malformed file) raises LookupError
and :mod:`expgit.git.repo` asks git.

Kept by measure (issue 36, docs/development.md): a ref read here takes 2 us, ``git
rev-parse`` 5.6 ms (a process), and a command reads tens of refs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from expgit.errors import ConflictError, LockHeldError
from expgit.git.objects import is_sha

# refs that live in each worktree's own git dir, not in the common dir
PER_WORKTREE_REFS = ("refs/bisect/", "refs/worktree/", "refs/rewritten/")
# what git's check_refname_format refuses (plus *.lock, the files of a ref being written)
_BAD_REF_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock/|\.lock$|[/.]$")
_SYMREF_DEPTH = 5  # as deep as git follows symbolic refs


@dataclass(frozen=True, slots=True)
class RefUpdate:
    """One ref move of an atomic transaction. ``old`` None: must not exist (create);
    ``new`` None: delete. ``old`` given: the ref must still point there (CAS)."""

    ref: str
    new: str | None
    old: str | None


class RefMovedError(ConflictError):
    """A compare-and-swap failed: a ref was not where the writer expected it."""


class RefLockedError(LockHeldError):
    """A ref this write needs is locked (``<ref>.lock`` exists) by another process:
    a running git, or a crashed writer no expgit lock record owns. ``files``: every
    such lock file."""

    def __init__(self, files: list[str]) -> None:
        self.files = list(files)
        super().__init__(
            "cannot lock " + ("a ref: " if len(files) == 1 else f"{len(files)} refs: ")
            + ", ".join(files) + (" exists" if len(files) == 1 else " exist")
            + "; another git process is writing",
            hint="wait for it to finish; if no git process runs, a crashed one left "
                 "them: `expgit doctor` shows them, then remove them")


def plain_ref_name(name: str) -> bool:
    """Whether ``name`` is a well-formed ref name (and not a lock file)."""
    return _BAD_REF_CHARS.search(name) is None


class FilesRefs:
    """The refs of one common git dir, when it uses the ``files`` backend."""

    def __init__(self, common_dir: Path) -> None:
        self.common_dir = common_dir
        self._common = str(common_dir)
        self.enabled = ((common_dir / "refs" / "heads").is_dir()
                        and not (common_dir / "reftable").exists())
        self._packed: tuple[tuple[int, int, int], dict[str, str]] | None = None

    def readable(self, name: str) -> bool:
        """Whether ``name`` is a shared ref this class can read."""
        return (self.enabled and name.startswith("refs/")
                and not name.startswith(PER_WORKTREE_REFS) and plain_ref_name(name))

    def packed(self) -> Mapping[str, str]:
        """``{ref: object}`` of ``packed-refs`` (peeled lines and comments skipped). Kept
        while the file's inode, size and modification time stay the same, as git keeps it
        (git replaces the file by a rename: a rewrite is a new inode)."""
        path = os.path.join(self._common, "packed-refs")
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._packed
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as handle:
                text = handle.read()
        except (FileNotFoundError, NotADirectoryError):
            return {}
        found = {}
        for line in text.splitlines():
            if line and line[0] not in "#^":
                sha, _, name = line.partition(" ")
                found[name] = sha
        self._packed = (key, found)
        return found

    def loose(self, name: str) -> str | None:
        """The raw content of a loose ref file, None if there is no such file (or a
        folder of refs is there)."""
        try:
            return read_ref_file(os.path.join(self._common, name))
        except IsADirectoryError:
            return None

    def _follow(self, name: str) -> tuple[str | None, str]:
        """Follow ``name`` through loose files (symbolic refs as deep as git follows
        them): (object, ref) when a loose file holds the object, (None, ref) when the
        ref at the end of the chain has no loose file (``packed-refs`` decides)."""
        for _ in range(_SYMREF_DEPTH):
            value = self.loose(name)
            if value is None:
                return None, name
            if value.startswith("ref:"):
                name = value[4:].strip()
                if not self.readable(name):
                    raise LookupError(name)
                continue
            if is_sha(value):
                return value, name
            raise LookupError(name)
        raise LookupError(name)

    def read(self, name: str, packed: Mapping[str, str] | None = None) -> str | None:
        """The object ``name`` points to, None if there is no such ref; LookupError when
        this cannot tell (a symbolic ref out of the shared refs, a malformed file).
        ``packed``: ``packed-refs`` read after the loose files, for many reads in a row."""
        sha, last = self._follow(name)
        if sha is not None:
            return sha
        return _packed_value(last, self.packed() if packed is None else packed)

    def read_many(self, names: Iterable[str]) -> dict[str, str]:
        """``{ref: object}`` of those of ``names`` that exist; LookupError as :meth:`read`,
        or for a name this cannot read. The loose files first, then ``packed-refs`` once
        (not at all when every ref is loose): each ref is read as :meth:`read` reads it."""
        found: dict[str, str | None] = {}
        not_loose: dict[str, str] = {}  # name: the ref packed-refs decides
        for name in names:
            if not self.readable(name):
                raise LookupError(name)
            found[name], last = self._follow(name)
            if found[name] is None:
                not_loose[name] = last
        if not_loose:
            packed = self.packed()
            for name, last in not_loose.items():
                found[name] = _packed_value(last, packed)
        return {name: sha for name, sha in found.items() if sha is not None}

    def listing(self, prefix: str) -> dict[str, str]:
        """``{ref: object}`` below ``prefix`` (ending in ``/``), sorted by name, as
        ``git for-each-ref`` lists them; LookupError when one of them cannot be read."""
        loose: list[str] = []
        pending = [prefix]
        while pending:
            folder = pending.pop()
            try:
                with os.scandir(self.common_dir / folder) as it:
                    for item in it:
                        name = folder + item.name
                        if item.is_dir():
                            pending.append(name + "/")
                        elif plain_ref_name(name):  # skips *.lock files
                            loose.append(name)
            except (FileNotFoundError, NotADirectoryError):
                continue
        packed = self.packed()
        found = {}
        for name in loose:
            sha = self.read(name, packed)
            if sha is not None:
                found[name] = sha
        for name, sha in packed.items():  # a loose ref overrides its packed value
            if name.startswith(prefix) and name not in found:
                found[name] = sha
        return dict(sorted(found.items()))

    def head_symref(self, git_dir: Path) -> str | None:
        """The ref ``HEAD`` of ``git_dir`` names, None when it is detached; LookupError
        when the file says neither (or this is not the files backend)."""
        if not self.enabled:
            raise LookupError("HEAD")
        try:
            head = (git_dir / "HEAD").read_text("utf-8", "surrogateescape").strip()
        except OSError:
            head = ""
        if head.startswith("ref:"):
            return head[4:].strip() or None
        if is_sha(head):
            return None  # detached
        raise LookupError("HEAD")


def read_ref_file(path: str) -> str | None:
    """The content of the ref file at ``path``, stripped; None when there is none;
    IsADirectoryError when a folder is there."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:  # a regular file reads short only at its end: one read for a ref
        chunks = [os.read(fd, 4096)]
        while len(chunks[-1]) == 4096:
            chunks.append(os.read(fd, 4096))
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "surrogateescape").strip()


def _packed_value(name: str, packed: Mapping[str, str]) -> str | None:
    value = packed.get(name)
    if value is None or is_sha(value):
        return value
    raise LookupError(name)


def own_lock_file(path: object, common_dir: Path, git_dir: Path) -> str | None:
    """``path`` (read from a crash record: untrusted) when it names a lock file that a
    ref transaction takes (:meth:`expgit.git.reftx.RefWriter.lock_files`), reached
    through no symbolic link: ``<ref>.lock`` of a well-formed ref under ``refs/`` in the common dir,
    ``packed-refs.lock`` there, or ``HEAD.lock`` of this or another worktree's git dir;
    None for anything else (a relative path, ``..``, a file outside the git dir, another
    name, a symbolic link)."""
    if (not isinstance(path, str) or not os.path.isabs(path) or not path.endswith(".lock")
            or "\0" in path or ".." in path.split(os.sep)):
        return None
    folder, name = os.path.split(path)
    real = Path(os.path.realpath(folder))
    common = common_dir.resolve()
    found: str | None = None
    if name == "HEAD.lock":
        if real in (git_dir.resolve(), common) or real.parent == common / "worktrees":
            found = str(real / name)
    elif name == "packed-refs.lock":
        found = str(real / name) if real == common else None
    elif real.is_relative_to(common / "refs"):
        ref = f"{real.relative_to(common).as_posix()}/{name.removesuffix('.lock')}"
        found = str(real / name) if plain_ref_name(ref) else None
    return None if found is None or os.path.islink(found) else found
