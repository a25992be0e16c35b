"""Ref transactions of git's ``files`` backend written in process, as git writes them.

git moves a loose ref by creating ``<ref>.lock`` exclusively (``O_EXCL``: the lock every
git process and this module respect), checking the ref's current value under that lock
(compare-and-swap), writing the new value into the lock file, appending the reflog entry,
and renaming the lock onto the ref (a reader sees the old value or the new one, never a
mix; over an existing ref file the two are swapped and the lock removed, the same for
readers and cheaper, see :mod:`expgit.git.fsswap`). A transaction locks all its refs,
checks all of them, and only then renames: every ref moves or none does. A deletion also
holds ``packed-refs.lock`` (so ``git pack-refs`` cannot pack the ref meanwhile), removes
the loose file and its reflog, then the folders this left empty. A held lock is waited
for as git waits (``core.filesRefLockTimeout``, ``core.packedRefsTimeout``), then the
transaction is refused.

Only the common case is done here: plain shared refs whose current value is an object id
(loose or packed), whose new object is stored loose (a branch must get a commit), with no
file or folder in the way, deleting only refs that are loose alone and not ``HEAD``'s
branch. Anything else (a symbolic ref, a packed ref to delete, a name that clashes with
another ref, an object only a pack or an alternate holds, a no-op update) raises
:class:`GitMustWrite` before anything changed, and the caller lets ``git update-ref``
decide. Each file operation counts (each lets other threads take the interpreter), so
the checks use as few as git's own.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from expgit.git.fsswap import swap
from expgit.git.loose import loose_kind, loose_path, write_all
from expgit.git.objects import ZERO_SHA, is_sha
from expgit.git.refs import FilesRefs, RefLockedError, RefMovedError, RefUpdate, read_ref_file

REF_LOCK_TIMEOUT = 0.1  # git's default core.filesRefLockTimeout, in seconds
PACKED_LOCK_TIMEOUT = 1.0  # git's default core.packedRefsTimeout
_AUTO_LOGGED = ("refs/heads/", "refs/remotes/", "refs/notes/")
_GIT_SPACE = re.compile(r"[ \t\n\r]+")


class GitMustWrite(Exception):
    """This transaction is not one this module writes; nothing was changed."""


def reflog_message(message: str) -> str:
    """``message`` as git records it in a reflog: runs of whitespace made one space,
    none at either end (git's ``copy_reflog_msg``)."""
    return _GIT_SPACE.sub(" ", message).strip(" ")


def moved(reason: str) -> RefMovedError:
    return RefMovedError(f"a ref moved under this write, nothing was changed ({reason})",
                         hint="run the command again; it re-reads the current state")


@dataclass
class _Lock:
    name: str  # what the lock is for (a ref, HEAD, packed-refs)
    path: str  # the file it guards
    update: RefUpdate | None = None
    fd: int | None = None
    owned: bool = False  # the lock file is this transaction's (to remove at the end)
    current: str | None = None
    loose: bool = False  # the ref has a file of its own now (else: packed, or none)

    @property
    def lock(self) -> str:
        return self.path + ".lock"


@dataclass(frozen=True)
class FilesRefWriter:
    """In-process ref transactions of one repository (files backend). ``is_commit(sha)``:
    known to be a commit (one this process wrote or read), so only its file's existence
    is checked."""

    refs: FilesRefs
    git_dir: Path
    objects_dir: str
    is_commit: Callable[[str], bool] = lambda sha: False

    def apply(self, updates: Sequence[RefUpdate], message: str, *, log_all: str,
              committer: Callable[[], str | None], journal: Journal | None = None) -> None:
        """All ``updates`` or none: RefMovedError when one is not where it was expected;
        RefLockedError (naming every lock file in the way) when one is locked;
        GitMustWrite when git must do it (nothing changed then).
        ``log_all``: ``core.logAllRefUpdates`` as ``always``/``true``/``false``;
        ``committer()``: the reflog identity, None when only git can tell;
        ``journal(lock files, updates)``: told before the first lock file is made, so a
        crash leaves a record of what this process may have left behind."""
        self._check_shape(updates)
        common = str(self.refs.common_dir)
        locks = [_Lock(u.ref, os.path.join(common, u.ref), u)
                 for u in sorted(updates, key=lambda u: u.ref)]
        deleting = any(u.new is None for u in updates)
        head = self._head_logged(locks, log_all)
        extra: list[_Lock] = []
        if deleting:  # as git: packed-refs.lock too, so nobody packs a ref meanwhile
            extra.append(_Lock("packed-refs", os.path.join(common, "packed-refs")))
        if head is not None:
            extra.append(_Lock("HEAD", str(self.git_dir / "HEAD")))
        if journal is not None:
            journal([item.lock for item in [*locks, *extra]], updates)
        try:
            try:
                for item in locks:
                    _take(item, REF_LOCK_TIMEOUT)
                if deleting:
                    _take(extra[0], PACKED_LOCK_TIMEOUT)
            except _Locked:
                raise RefLockedError(_in_the_way([*locks, *extra])) from None
            self._read_current(locks, deleting)
            entries = self._log_entries(locks, message, log_all, head, committer)
            if head is not None:
                try:
                    _take(extra[-1], REF_LOCK_TIMEOUT)
                except _Locked:
                    raise RefLockedError(_in_the_way(extra[-1:])) from None
            for item in locks:
                if item.update is not None and item.update.new is not None:
                    assert item.fd is not None
                    write_all(item.fd, f"{item.update.new}\n".encode())
                _close(item)
            for path, line in entries:
                _append(path, line)
            for item in locks:
                if item.update is not None and item.update.new is not None:
                    _install(item)
            for item in locks:
                if item.update is not None and item.update.new is None:
                    self._delete(item)
        finally:
            for item in [*locks, *extra]:
                _release(item)
        self._remove_empty_folders([item.name for item in locks
                                    if item.update is not None and item.update.new is None])

    # ------------------------------------------------------------------ checks
    def _check_shape(self, updates: Sequence[RefUpdate]) -> None:
        names = [u.ref for u in updates]
        if not updates or len(set(names)) != len(names):
            raise GitMustWrite("no update, or a ref twice")
        listed = dict.fromkeys(names)
        for u in updates:
            if not self.refs.readable(u.ref) or _clashes(u.ref, listed):
                raise GitMustWrite(u.ref)
            if u.new is None:
                if u.old is None:
                    raise GitMustWrite("an unchecked deletion")
                continue
            if not is_sha(u.new):
                raise GitMustWrite(u.new)
            if self.is_commit(u.new):
                if not os.path.exists(loose_path(self.objects_dir, u.new)):
                    raise GitMustWrite(f"{u.new} is not stored loose")
                continue
            kind = loose_kind(self.objects_dir, u.new)
            if kind is None or (u.ref.startswith("refs/heads/") and kind != b"commit"):
                raise GitMustWrite(f"{u.new} is not a loose object this ref may hold")

    def _read_current(self, locks: list[_Lock], deleting: bool) -> None:
        packed: Mapping[str, str] | None = None
        for item in locks:
            assert item.update is not None
            item.current = _read_loose(item.path)
            item.loose = item.current is not None
            if item.current is None or deleting:
                packed = self.refs.packed() if packed is None else packed
            if item.update.new is None and packed is not None and item.name in packed:
                raise GitMustWrite("deleting a packed ref rewrites packed-refs")
            if item.current is None:
                assert packed is not None
                item.current = packed.get(item.name)
                if item.current is None and _clashes(item.name, packed):
                    raise GitMustWrite("a packed ref is in the way")
            if item.current is not None and not is_sha(item.current):
                raise GitMustWrite("a symbolic or malformed ref")
            _check_expected(item.update, item.current)
            if item.current == item.update.new:
                raise GitMustWrite("a no-op update")

    def _head_logged(self, locks: list[_Lock], log_all: str) -> _Lock | None:
        """The moved ref ``HEAD`` names, when git would log the move in ``HEAD``'s
        reflog too (GitMustWrite when it is deleted, or ``HEAD`` is not readable)."""
        if log_all == "false" and not os.path.isfile(self.git_dir / "logs" / "HEAD"):
            return None  # no HEAD reflog: whatever HEAD names, nothing to write
        try:
            head = self.refs.head_symref(self.git_dir)
        except LookupError:
            raise GitMustWrite("HEAD") from None
        for item in locks:
            if item.name == head:
                assert item.update is not None
                if item.update.new is None:
                    raise GitMustWrite("deleting the branch HEAD names")
                return item
        return None

    def _log_entries(self, locks: list[_Lock], message: str, log_all: str,
                     head: _Lock | None, committer: Callable[[], str | None]
                     ) -> list[tuple[str, bytes]]:
        """(log file, line) of every reflog entry git would append; their folders made."""
        logs = os.path.join(self.refs.common_dir, "logs")
        paths: list[tuple[str, _Lock]] = []
        for item in locks:
            assert item.update is not None
            if item.update.new is None:
                continue  # its reflog is deleted with it
            path = os.path.join(logs, item.name)
            if (log_all == "always" or (log_all == "true" and item.name.startswith(_AUTO_LOGGED))
                    or os.path.isfile(path)):
                paths.append((path, item))
        if head is not None:
            paths.append((str(self.git_dir / "logs" / "HEAD"), head))
        if not paths:
            return []
        who = committer()
        if who is None:
            raise GitMustWrite("the committer identity is git's to choose")
        for path, _ in paths:  # nothing in the way of a log, before anything is written
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise GitMustWrite("a file is in the way of a reflog folder") from None
            if os.path.isdir(path):
                raise GitMustWrite("a folder is in the way of a reflog")
        text = reflog_message(message)
        tail = f"\t{text}\n" if text else "\n"
        return [(path, f"{item.current or ZERO_SHA} {item.update.new} {who}{tail}".encode())
                for path, item in paths if item.update is not None]

    # ----------------------------------------------------------------- deletion
    def _delete(self, item: _Lock) -> None:
        """The reflog first, then the ref (git's order: a ref without a reflog is less
        bad than a reflog without a ref)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.refs.common_dir, "logs", item.name))
        os.unlink(item.path)

    def _remove_empty_folders(self, deleted: list[str]) -> None:
        """The folders of the ``deleted`` refs (and of their reflogs) that are empty now,
        up to ``refs/<kind>/`` (git's ``try_remove_empty_parents``); a folder shared by
        several of them is tried once."""
        tried: set[str] = set()
        for base in (str(self.refs.common_dir), os.path.join(self.refs.common_dir, "logs")):
            for ref in deleted:
                parts = ref.split("/")
                for depth in range(len(parts) - 1, 2, -1):
                    folder = os.path.join(base, *parts[:depth])
                    if folder in tried:
                        break  # tried for a ref before (and so were its parents)
                    tried.add(folder)
                    try:
                        os.rmdir(folder)
                    except OSError:
                        break  # not empty (or gone): its parents are not empty either


Journal = Callable[[list[str], Sequence[RefUpdate]], None]


class _Locked(Exception):
    """A lock file stayed in the way past its timeout."""


def _in_the_way(items: Sequence[_Lock]) -> list[str]:
    """The lock files of ``items`` that exist and are not this transaction's."""
    return [item.lock for item in items if not item.owned and os.path.exists(item.lock)]


def _take(item: _Lock, timeout: float) -> None:
    """Create ``item``'s lock file (its folders if needed), waiting up to ``timeout``
    for another holder to let go."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    for _ in range(1000):  # a folder removed again and again meanwhile: give up
        try:
            item.fd = os.open(item.lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            item.owned = True
            return
        except FileExistsError:
            if time.monotonic() >= deadline:
                raise _Locked(item.lock) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        except FileNotFoundError:  # the first ref of its folder
            try:
                os.makedirs(os.path.dirname(item.lock), exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise GitMustWrite("a ref is in the way of a folder") from None
        except NotADirectoryError:
            raise GitMustWrite("a ref is in the way of a folder") from None
    raise GitMustWrite("the folder of a lock kept disappearing")  # pragma: no cover


def _read_loose(path: str) -> str | None:
    """The loose ref file's content, None without one; GitMustWrite for a folder."""
    try:
        return read_ref_file(path)
    except IsADirectoryError:
        raise GitMustWrite("a folder is in the way of the ref") from None


def _check_expected(update: RefUpdate, current: str | None) -> None:
    expected, ref = update.old, update.ref
    if expected is None or expected == ZERO_SHA:
        if current is not None:
            raise moved(f"cannot lock ref '{ref}': reference already exists")
    elif current is None:
        raise moved(f"cannot lock ref '{ref}': unable to resolve reference '{ref}'")
    elif current != expected:
        raise moved(f"cannot lock ref '{ref}': is at {current} but expected {expected}")


def _clashes(ref: str, others: Mapping[str, object]) -> bool:
    """Whether one of ``others`` (names) is a folder of ``ref`` or lies below it."""
    parts = ref.split("/")
    if any("/".join(parts[:i]) in others for i in range(2, len(parts))):
        return True
    below = ref + "/"
    return any(name.startswith(below) for name in others)


def _install(item: _Lock) -> None:
    """The lock file (new value written) becomes the ref. Over an existing file, the two
    are swapped and the lock (now the old value) removed: cheaper than a rename on some
    file systems (:mod:`expgit.git.fsswap`) and as atomic for readers."""
    if item.loose and swap(item.lock, item.path):
        os.unlink(item.lock)
    else:
        os.rename(item.lock, item.path)
    item.owned = False  # nothing left to remove


def _append(path: str, line: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        write_all(fd, line)
    finally:
        os.close(fd)


def _close(item: _Lock) -> None:
    if item.fd is not None:
        fd, item.fd = item.fd, None
        os.close(fd)


def _release(item: _Lock) -> None:
    with contextlib.suppress(OSError):
        _close(item)
    if item.owned:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(item.lock)
        item.owned = False
