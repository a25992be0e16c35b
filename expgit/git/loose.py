"""Loose objects read and written without a process, and commits serialised as ``git
commit-tree`` writes them.

A loose object is the zlib stream of ``<kind> <size>\\0<content>`` in
``objects/<2 hex>/<rest>``; git replaces it atomically (a finished file is linked or
renamed into place), so a reader sees a whole object or none. Objects in packs (or in a
quarantine or alternate directory) are not found here: :mod:`expgit.git.repo` then asks git.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import zlib
from collections.abc import Sequence
from types import ModuleType

try:  # zlib-ng deflates 2-3x faster than zlib at the same level; any zlib stream reads alike
    from zlib_ng import zlib_ng as _zlib_ng

    _DEFLATE: ModuleType = _zlib_ng
except ImportError:  # pragma: no cover - a dependency; plain zlib writes the same objects
    _DEFLATE = zlib

# what git's verify_utf8 rewrites in a commit message (NUL, which git refuses, and the
# non-characters U+FDD0..U+FDEF and U+xxFFFE/U+xxFFFF): such messages are left to git
_GIT_REWRITES = re.compile(
    "[\0\ufdd0-\ufdef"
    + "".join(chr((plane << 16) | 0xFFFE) + chr((plane << 16) | 0xFFFF) for plane in range(17))
    + "]")


def loose_path(objects_dir: str, sha: str) -> str:
    """The file of the loose object ``sha``: ``objects/<2 hex>/<rest>``."""
    return os.path.join(objects_dir, sha[:2], sha[2:])


def read_loose(objects_dir: str, sha: str) -> tuple[bytes, bytes] | None:
    """(kind, content) of the loose object ``sha``, None when it is not stored loose (or
    the file is not a well-formed object of that size)."""
    try:
        with open(loose_path(objects_dir, sha), "rb") as handle:
            raw = handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        data = zlib.decompress(raw)
    except zlib.error:
        return None
    head, sep, content = data.partition(b"\0")
    kind, _, size = head.partition(b" ")
    if not sep or not size.isdigit() or int(size) != len(content):
        return None
    return kind, content


def loose_kind(objects_dir: str, sha: str) -> bytes | None:
    """The kind (``b"commit"``, ...) of the loose object ``sha`` from the head of its
    file, None when it is not stored loose (or its head is not an object header)."""
    try:
        with open(loose_path(objects_dir, sha), "rb") as handle:
            start = handle.read(512)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    try:
        head = zlib.decompressobj().decompress(start, 32)
    except zlib.error:
        return None
    kind, space, size = head.partition(b"\0")[0].partition(b" ")
    if not space or not size.isdigit() or kind not in (b"commit", b"tree", b"blob", b"tag"):
        return None
    return kind


def message_needs_git(message: str) -> bool:
    """Whether git would refuse or rewrite this commit message (then git writes it)."""
    return _GIT_REWRITES.search(message) is not None


def serialise_commit(tree: str, parents: Sequence[str], author: str, committer: str,
                     message: str) -> bytes:
    """The raw commit ``git commit-tree`` writes (UTF-8, no encoding header, unsigned);
    ``message`` ends with a newline."""
    lines = [f"tree {tree}", *(f"parent {p}" for p in parents), f"author {author}",
             f"committer {committer}"]
    return ("\n".join(lines) + "\n\n" + message).encode()


def write_loose(objects_dir: str, kind: bytes, data: bytes, level: int, *,
                fresh: bool = False) -> str:
    """Write one SHA-1 object as git's ``write_object_file`` does; its id.

    The id is the SHA-1 of ``<kind> <size>\\0<data>``. An object already stored loose is
    only freshened (its mtime, which ``git gc`` reads); otherwise its zlib stream is
    written to a file that has no name yet (``O_TMPFILE``), which is then linked under
    its final name: a reader never sees a partial object, and the folder changes once.
    Where the file system or the kernel has no unnamed files (or ``/proc`` is missing),
    it is written to a ``tmp_obj_*`` file (mode 0444 less the umask) next to its final
    name and renamed into place, as git does (``core.createObject=rename``). ``fresh``:
    the object is almost surely new (a tree or commit just built), so it is written
    without looking for it first; a copy that was there is kept and freshened. Safe
    against concurrent writers of the same object: same id, same content."""
    header = b"%s %d\0" % (kind, len(data))
    digest = hashlib.sha1(header)
    digest.update(data)
    sha = digest.hexdigest()
    final = loose_path(objects_dir, sha)
    folder = os.path.dirname(final)
    if not fresh:
        try:
            os.utime(final)
            return sha
        except OSError:
            pass  # not there (or not ours to touch): write it
    compressor = _DEFLATE.compressobj(level)
    payload = memoryview(compressor.compress(header) + compressor.compress(data)
                         + compressor.flush())
    if not (_UNNAMED_FILES and _write_unnamed(folder, final, payload)):
        _write_renamed(folder, final, payload)
    return sha


_O_TMPFILE: int = getattr(os, "O_TMPFILE", 0)
_UNNAMED_FILES = bool(_O_TMPFILE) and os.path.isdir("/proc/self/fd")
# the kernel, the file system or /proc has no unnamed files: remembered for the process
_NO_UNNAMED_FILES = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT, errno.EXDEV)
# not allowed here: this write falls back (and fails there too if the folder is not ours)
_NOT_HERE = (errno.EPERM, errno.EACCES)


def _write_unnamed(folder: str, final: str, payload: memoryview) -> bool:
    """Write ``payload`` to an unnamed file in ``folder`` and link it as ``final``; False
    (nothing written) where unnamed files are not available (remembered) or allowed."""
    try:
        fd = _open_in(folder, folder, _O_TMPFILE | os.O_WRONLY)
    except OSError as exc:
        if _declined(exc):
            return False
        raise
    try:
        write_all(fd, payload)
        try:
            # the link that names it: through /proc, following the magic link (not
            # AT_EMPTY_PATH, which needs a privilege); a dir fd makes Python use linkat
            os.link(f"/proc/self/fd/{fd}", final, src_dir_fd=fd, follow_symlinks=True)
        except FileExistsError:  # another writer stored it meanwhile: same content
            with contextlib.suppress(OSError):
                os.utime(final)
        except OSError as exc:
            if _declined(exc):
                return False
            raise
    finally:
        os.close(fd)
    return True


def _declined(exc: OSError) -> bool:
    global _UNNAMED_FILES
    if exc.errno in _NO_UNNAMED_FILES:
        _UNNAMED_FILES = False
    return exc.errno in _NO_UNNAMED_FILES or exc.errno in _NOT_HERE


def _open_in(folder: str, path: str, flags: int) -> int:
    """``path`` (in or being ``folder``) opened with ``flags``, mode 0444 less the umask;
    ``folder`` made first when this is its first object."""
    try:
        return os.open(path, flags, 0o444)
    except FileNotFoundError:
        os.makedirs(folder, exist_ok=True)
        return os.open(path, flags, 0o444)


def _write_renamed(folder: str, final: str, payload: memoryview) -> None:
    tmp = os.path.join(folder, f"tmp_obj_{secrets.token_hex(8)}")
    fd = _open_in(folder, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        try:
            write_all(fd, payload)
        finally:
            os.close(fd)
        os.rename(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_all(fd: int, payload: bytes | memoryview) -> None:
    """Write all of ``payload`` to the file descriptor ``fd`` (short writes resumed)."""
    payload = memoryview(payload)
    while payload:
        payload = payload[os.write(fd, payload):]
