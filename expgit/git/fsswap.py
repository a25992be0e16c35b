"""Swapping two files in one step (Linux ``renameat2(RENAME_EXCHANGE)``).

A ref moves by renaming ``<ref>.lock`` onto ``<ref>``. When ``<ref>`` exists, ext4 (with
its default ``auto_da_alloc``) takes that rename for the "replace a file by a new
version" pattern and allocates and starts writing the new file's blocks inside the
rename, so a reader after a crash never finds it empty; on a virtual disk that costs
0.1-0.4 ms per ref move, 10-40 times the rename itself. Swapping the two names instead
is just as atomic for readers (``<ref>`` holds the old value, then the new one) and skips
that work: afterwards the lock file holds the old value, and removing it releases the
lock. The data reaches the disk when the kernel writes it back, as for every other file
git and expgit write without ``core.fsync``.

Where the call does not exist (not Linux, an old C library) or the file system refuses
it, :func:`swap` says so and changes nothing; callers then rename.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable

__all__ = ["swap"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2  # linux/fs.h
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM, errno.EXDEV}


def _load() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # a C library without it (glibc < 2.28)
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint]
    function.restype = ctypes.c_int
    loaded: Callable[..., int] = function
    return loaded


_renameat2 = _load()
_refused: set[str] = set()  # folders whose file system refused an exchange


def swap(first: str, second: str) -> bool:
    """Exchange the files named ``first`` and ``second`` (both must exist), atomically;
    False when this system or file system cannot (nothing changed then). Raises OSError
    for any other failure (a name missing, no permission), nothing changed either."""
    if _renameat2 is None:
        return False
    folder = os.path.dirname(second)
    if folder in _refused:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second),
                  _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        _refused.add(folder)
        return False
    raise OSError(code, os.strerror(code), first, None, second)
