"""Git's NUL-terminated listings (``-z``), parsed in one place.

Without ``-z`` git quotes a path that holds a tab, a newline, a double quote or a
backslash (``"experiences/a\\tb.md"``, whatever ``core.quotepath`` says), and a newline
in a name splits a line in two: a reader of plain lines then misses the file or takes
half of it. Every listing expgit reads that carries paths (``ls-tree``, ``diff-tree``,
``diff-index``, ``diff``, ``ls-files``, ``for-each-ref``) is asked for with ``-z`` (or a
``%00`` format) and parsed here; paths come back exactly as the tree holds them.
:func:`shown_path` shows one on a terminal as git does: C-quoted when it needs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from expgit.errors import GitError
from expgit.git.objects import GITLINK_MODE

__all__ = ["Listed", "RawChange", "fields", "ls_files_stage", "ls_tree", "raw_diff",
           "shown_path"]


@dataclass(frozen=True, slots=True)
class Listed:
    """One entry of ``git ls-tree -z``: ``kind`` is blob, tree or commit (a gitlink)."""

    mode: str
    kind: str
    sha: str
    path: str


@dataclass(frozen=True, slots=True)
class RawChange:
    """One entry of ``--raw -z`` (``diff-tree``, ``diff-index``, ``diff``): a side that
    is not there has an all-zero id; ``status`` is git's letter (A, M, D, T, ...)."""

    old_mode: str
    new_mode: str
    old_sha: str
    new_sha: str
    status: str
    path: str


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")  # as trees are read in process


def fields(data: bytes) -> list[str]:
    """The NUL-terminated fields of ``data`` (the last one may lack its NUL)."""
    parts = data.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [_decode(part) for part in parts]


def _three_fields(data: bytes, command: str) -> list[tuple[list[str], str]]:
    """``<a> SP <b> SP <c> TAB <path>`` records: ``([a, b, c], path)`` each."""
    found = []
    for record in fields(data):
        meta, tab, path = record.partition("\t")
        parts = meta.split(" ")
        if not tab or len(parts) != 3:
            raise GitError(f"unexpected git {command} output: {record[:80]!r}")
        found.append((parts, path))
    return found


def ls_tree(data: bytes) -> list[Listed]:
    """``git ls-tree -z`` output: ``<mode> SP <kind> SP <id> TAB <path>`` per entry."""
    return [Listed(mode, kind, sha, path)
            for (mode, kind, sha), path in _three_fields(data, "ls-tree")]


def ls_files_stage(data: bytes) -> list[Listed]:
    """``git ls-files -s -z`` output: ``<mode> SP <id> SP <stage> TAB <path>`` per entry,
    as :class:`Listed` entries (a gitlink's kind is commit, any other's blob)."""
    return [Listed(mode, "commit" if mode == GITLINK_MODE else "blob", sha, path)
            for (mode, sha, _), path in _three_fields(data, "ls-files")]


def raw_diff(data: bytes) -> list[RawChange]:
    """``--raw -z`` output: ``:<old mode> <new mode> <old id> <new id> <status>``, then
    the path as the next field (a rename or copy has two: the new one is kept)."""
    items = fields(data)
    found = []
    at = 0
    while at < len(items):
        parts = items[at].removeprefix(":").split(" ")
        paths = 2 if parts[-1][:1] in ("R", "C") else 1
        if not items[at].startswith(":") or len(parts) != 5 or at + paths >= len(items):
            raise GitError(f"unexpected git --raw output: {items[at][:80]!r}")
        old_mode, new_mode, old_sha, new_sha, status = parts
        found.append(RawChange(old_mode, new_mode, old_sha, new_sha, status, items[at + paths]))
        at += 1 + paths
    return found


_C_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f",
              "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def shown_path(path: str) -> str:
    """``path`` as git shows it with ``core.quotepath=off``: unchanged when it is plain,
    else in double quotes with C escapes (a control character as an octal escape), so a
    name can never start a new line or an escape sequence on a terminal."""
    if not any(_quoted(c) for c in path):
        return path
    out = []
    for c in path:
        if c in _C_ESCAPES:
            out.append(_C_ESCAPES[c])
        elif "\udc80" <= c <= "\udcff":  # an undecodable byte, kept by surrogateescape
            out.append(f"\\{ord(c) - 0xDC00:03o}")
        elif _quoted(c):  # C0, DEL, C1 (a terminal may take U+009B as CSI): its bytes
            out.extend(f"\\{byte:03o}" for byte in c.encode())
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _quoted(c: str) -> bool:
    return (c in _C_ESCAPES or c < " " or "\x7f" <= c <= "\x9f"
            or "\udc80" <= c <= "\udcff")
