"""Loose objects read without a process, and commits serialised as ``git commit-tree``
writes them.

A loose object is the zlib stream of ``<kind> <size>\\0<content>`` in
``objects/<2 hex>/<rest>``; git replaces it atomically (a finished file is linked or
renamed into place), so a reader sees a whole object or none. Objects in packs (or in a
quarantine or alternate directory) are not found here: :mod:`expgit.gitrepo` then asks git.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Sequence

# what git's verify_utf8 rewrites in a commit message (NUL, which git refuses, and the
# non-characters U+FDD0..U+FDEF and U+xxFFFE/U+xxFFFF): such messages are left to git
_GIT_REWRITES = re.compile(
    "[\0\ufdd0-\ufdef"
    + "".join(chr((plane << 16) | 0xFFFE) + chr((plane << 16) | 0xFFFF) for plane in range(17))
    + "]")


def read_loose(objects_dir: str, sha: str) -> tuple[bytes, bytes] | None:
    """(kind, content) of the loose object ``sha``, None when it is not stored loose (or
    the file is not a well-formed object of that size)."""
    try:
        with open(os.path.join(objects_dir, sha[:2], sha[2:]), "rb") as handle:
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
        with open(os.path.join(objects_dir, sha[:2], sha[2:]), "rb") as handle:
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
