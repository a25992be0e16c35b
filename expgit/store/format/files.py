"""Reading a file a user named: a regular file only, opened without blocking.

``open()`` on a named pipe waits for a writer, for ever if none comes, and a device can
stream without end. :func:`read_regular_file` opens with ``O_NONBLOCK`` and looks at
what it opened (``fstat``, so a file swapped after a check is still seen for what it
is): anything but a regular file is refused with :class:`NotRegularFileError`, at once.
GNU tar and rsync look at the file type in the same way before they read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from expgit.errors import NotRegularFileError

_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISDIR, "a folder"))


def file_kind(mode: int) -> str:
    """What a file of ``mode`` is, in words ("a named pipe")."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular_file(path: Path) -> bytes:
    """The bytes of the regular file at ``path`` (a symlink to one is followed).
    NotRegularFileError for anything else; FileNotFoundError and other OSErrors as
    ``open`` raises them."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(str(path), file_kind(mode))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    finally:
        os.close(fd)
