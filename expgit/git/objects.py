"""git's object formats in pure Python: trees, commits and loose objects.

No process and no GitPython here; :mod:`expgit.git.repo` wires these to a repository.

* A tree is parsed into :class:`TreeEntry` tuples in git's order (:func:`parse_tree`),
  keeping its raw bytes and, once needed, the byte offset of each entry: an edit splices
  the bytes of the unchanged runs (:func:`splice`) instead of serialising every entry
  again, and a tree that differs from a known one only in a few object ids is parsed by
  comparison with it.
* :func:`diff_entries` pairs the differing entries of two trees, one level deep.
* :func:`parse_commit` reads the header fields expgit uses; :func:`serialise_commit`
  writes one as ``git commit-tree`` does.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import NamedTuple

ZERO_SHA = "0" * 40
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
TREE_MODE = "40000"
SYMLINK_MODE = "120000"
GITLINK_MODE = "160000"  # a submodule: its commit is in another repository

# what git's verify_utf8 rewrites in a commit message (NUL, which git refuses, and the
# non-characters U+FDD0..U+FDEF and U+xxFFFE/U+xxFFFF): such messages are left to git
_GIT_REWRITES = re.compile(
    "[\0\ufdd0-\ufdef"
    + "".join(chr((plane << 16) | 0xFFFE) + chr((plane << 16) | 0xFFFF) for plane in range(17))
    + "]")
_TREE_ENTRY_RE = re.compile(rb"([0-7]+) ([^\0]*)\0(.{20})", re.DOTALL)
_HEX = frozenset("0123456789abcdef")
# settings that change how git writes a loose object; any of them set (other than the
# compression level): let git write it
WRITER_CONFIG = (r"^(core\.(sharedrepository|fsync|fsyncobjectfiles|loosecompression"
                 r"|compression)|extensions\.objectformat)$")


class TreeEntry(NamedTuple):
    mode: str
    name: str
    sha: str

    @property
    def is_tree(self) -> bool:
        return self.mode == TREE_MODE


Pair = tuple[TreeEntry | None, TreeEntry | None]


@dataclass(slots=True)
class Tree:
    """A parsed tree: its entries in git's order, its raw bytes and, once needed, the
    byte offset of each entry in them (plus the end), so an edit can splice bytes."""

    entries: list[TreeEntry]
    raw: bytes
    offsets: array[int] | None = None
    index: dict[str, TreeEntry] | None = None

    def by_name(self) -> dict[str, TreeEntry]:
        """``{name: entry}``, built on first use (computing it twice is harmless)."""
        if self.index is None:
            self.index = {e.name: e for e in self.entries}
        return self.index


@dataclass(frozen=True, slots=True)
class CommitInfo:
    sha: str
    tree: str
    parents: tuple[str, ...]
    author: str  # "Name <email>"
    author_time: int
    author_line: str  # "Name <email> <time> <tz>", as recorded
    committer: str
    commit_time: int
    message: str


def is_sha(text: str) -> bool:
    """Whether ``text`` is a full object id (SHA-1 or SHA-256, lower-case hex)."""
    return len(text) in (40, 64) and _HEX.issuperset(text)


# ----------------------------------------------------------------------- trees
def tree_sort_key(entry: TreeEntry) -> bytes:
    name = entry.name.encode("utf-8", "surrogateescape")
    return name + b"/" if entry.is_tree else name


def entry_bytes(entry: TreeEntry) -> bytes:
    return (entry.mode.encode() + b" " + entry.name.encode("utf-8", "surrogateescape") + b"\0"
            + bytes.fromhex(entry.sha))


def serialise_tree(ordered: Iterable[TreeEntry]) -> bytes:
    """The raw bytes of a tree whose entries are already in git's order."""
    return b"".join(map(entry_bytes, ordered))


def parse_tree(data: bytes, like: Tree | None = None) -> Tree | None:
    """The raw tree ``data`` parsed, or None if it is not a well-formed tree. ``like``: a
    parsed tree it probably resembles (the same tree before a few edits), which makes
    parsing it nearly free."""
    tree = _parse_like(data, like) if like is not None else None
    if tree is not None:
        return tree
    found = _TREE_ENTRY_RE.findall(data)
    modes: dict[bytes, str] = {}
    entries = [TreeEntry(modes.get(mode) or modes.setdefault(mode, mode.decode()),
                         name.decode("utf-8", "surrogateescape"), raw.hex())
               for mode, name, raw in found]
    offsets = array("q", accumulate(
        (len(mode) + len(name) + 22 for mode, name, _ in found), initial=0))
    return Tree(entries, data, offsets) if offsets[-1] == len(data) else None


def _parse_like(data: bytes, base: Tree) -> Tree | None:
    """``data`` parsed by comparison with a parsed tree of the same size, or None.

    When every entry keeps its mode and name at the same offset, only object ids changed:
    equal runs of bytes are skipped with a few block comparisons, and only the entries
    in differing blocks are looked at. Anything else (an entry added, removed or renamed)
    returns None and the tree is parsed in full."""
    offsets = base.offsets
    if offsets is None or len(base.raw) != len(data):
        return None
    old, entries = base.raw, base.entries
    result: list[TreeEntry] | None = None
    for start in range(0, len(entries), 64):
        end = min(start + 64, len(entries))
        if old[offsets[start]:offsets[end]] == data[offsets[start]:offsets[end]]:
            continue
        for i in range(start, end):
            head, tail = offsets[i], offsets[i + 1]
            if old[head:tail] == data[head:tail]:
                continue
            if old[head:tail - 20] != data[head:tail - 20]:
                return None  # a mode or a name changed
            if result is None:
                result = list(entries)
            entry = entries[i]
            result[i] = TreeEntry(entry.mode, entry.name, data[tail - 20:tail].hex())
    return Tree(entries if result is None else result, data, offsets)


def splice(tree: Tree, edits: Mapping[str, TreeEntry | None]) -> Tree | None:
    """``tree`` with each edited name replaced, added or dropped (None), as a new parsed
    tree (its entries, raw bytes, offsets and index derived from those of ``tree``):
    binary searches for the edited names, then slices of the unchanged runs. None when
    ``tree`` is not in git's order or holds a name twice."""
    entries = tree.entries
    index = tree.by_name()
    if len(index) != len(entries):
        return None
    # (position in the old entries, 0 insert / 1 replace or drop, sort key, new entry)
    ops: list[tuple[int, int, bytes, TreeEntry | None]] = []
    for name, new in edits.items():
        old = index.get(name)
        if old is not None:
            key = tree_sort_key(old)
            pos = bisect_left(entries, key, key=tree_sort_key)
            if pos == len(entries) or entries[pos] != old:
                return None
            if new is not None and new.is_tree == old.is_tree:
                ops.append((pos, 1, key, new))
                continue
            ops.append((pos, 1, key, None))
        if new is not None:
            key = tree_sort_key(new)
            ops.append((bisect_left(entries, key, key=tree_sort_key), 0, key, new))
    if tree.offsets is None:
        tree.offsets = array("q", accumulate(
            (len(e.mode) + len(e.name.encode("utf-8", "surrogateescape")) + 22
             for e in entries), initial=0))
    offsets, raw = tree.offsets, tree.raw
    new_entries: list[TreeEntry] = []
    new_offsets = array("q")
    pieces: list[bytes] = []
    cursor = size = 0  # the next old entry to copy; bytes of the new tree so far
    for pos, kind, _, new in sorted(ops, key=lambda op: op[:3]):
        new_entries += entries[cursor:pos]
        new_offsets.extend(map((size - offsets[cursor]).__add__, offsets[cursor:pos]))
        pieces.append(raw[offsets[cursor]:offsets[pos]])
        size += offsets[pos] - offsets[cursor]
        cursor = pos + kind  # a replaced or dropped entry is skipped
        if new is not None:
            new_entries.append(new)
            new_offsets.append(size)
            pieces.append(entry_bytes(new))
            size += len(pieces[-1])
    new_entries += entries[cursor:]
    new_offsets.extend(map((size - offsets[cursor]).__add__, offsets[cursor:]))
    pieces.append(raw[offsets[cursor]:])
    new_index = dict(index)
    for name, new in edits.items():
        if new is None:
            new_index.pop(name, None)
        else:
            new_index[name] = new
    return Tree(new_entries, b"".join(pieces), new_offsets, new_index)


def diff_entries(before: list[TreeEntry], after: list[TreeEntry]) -> list[Pair]:
    """The entries of two trees that differ, as (old, new) pairs in tree order; an entry
    only one side has is paired with None (so a name that turned from a tree into a file,
    or back, comes as two pairs)."""
    if len(before) == len(after):  # the common case, edits only: compare in step
        pairs = [(b, a) for b, a in zip(before, after, strict=True) if b is not a and b != a]
        if all(b.name == a.name and b.is_tree == a.is_tree for b, a in pairs):
            return [(b, a) for b, a in pairs]
    result: list[Pair] = []
    i = j = 0
    while i < len(before) and j < len(after):
        b, a = before[i], after[j]
        if b == a:
            i, j = i + 1, j + 1
        elif b.name == a.name and b.is_tree == a.is_tree:
            result.append((b, a))
            i, j = i + 1, j + 1
        elif tree_sort_key(b) < tree_sort_key(a):
            result.append((b, None))
            i += 1
        else:
            result.append((None, a))
            j += 1
    result += [(b, None) for b in before[i:]]
    result += [(None, a) for a in after[j:]]
    return result


def edit_pairs(index: Mapping[str, TreeEntry], edits: Mapping[str, TreeEntry | None]
               ) -> list[Pair]:
    """What :func:`diff_entries` finds between a tree (its entries by name: ``index``; in
    git's order, no name twice) and the same tree with ``edits`` made (:func:`splice`),
    from the edits alone."""
    keyed: list[tuple[bytes, Pair]] = []
    for name, new in edits.items():
        old = index.get(name)
        if old == new:
            continue
        if old is not None and new is not None and old.is_tree == new.is_tree:
            keyed.append((tree_sort_key(old), (old, new)))
            continue
        if old is not None:
            keyed.append((tree_sort_key(old), (old, None)))
        if new is not None:
            keyed.append((tree_sort_key(new), (None, new)))
    return [pair for _, pair in sorted(keyed, key=lambda item: item[0])]


def split_edits(changes: Mapping[str, str | None]
                ) -> tuple[dict[str, TreeEntry | None], dict[str, dict[str, str | None]]]:
    """``{path: blob or None}`` as (this level's edits by name: a 100644 entry or None to
    drop it, the changes below each sub-folder by its name, relative to it)."""
    edits: dict[str, TreeEntry | None] = {}
    nested: dict[str, dict[str, str | None]] = {}
    for path, blob in changes.items():
        head, _, rest = path.strip("/").partition("/")
        if rest:
            nested.setdefault(head, {})[rest] = blob
        else:
            edits[head] = None if blob is None else TreeEntry("100644", head, blob)
    return edits, nested


def merged_entries(entries: Iterable[TreeEntry], edits: Mapping[str, TreeEntry | None]
                   ) -> list[TreeEntry]:
    """``entries`` with the edits made, in git's order; the slow path of :func:`splice`."""
    merged = {e.name: e for e in entries}
    for name, new in edits.items():
        if new is None:
            merged.pop(name, None)
        else:
            merged[name] = new
    return sorted(merged.values(), key=tree_sort_key)


# --------------------------------------------------------------------- commits
def parse_commit(sha: str, raw: bytes) -> CommitInfo:
    header, _, message = raw.decode("utf-8", "replace").partition("\n\n")
    tree, parents, author, committer, author_line = "", [], ("", 0), ("", 0), ""
    for line in header.splitlines():
        key, _, value = line.partition(" ")
        if key == "tree":
            tree = value
        elif key == "parent":
            parents.append(value)
        elif key in ("author", "committer"):
            ident, stamp, _tz = value.rsplit(" ", 2)
            if key == "author":
                author, author_line = (ident, int(stamp)), value
            else:
                committer = (ident, int(stamp))
    return CommitInfo(sha, tree, tuple(parents), author[0], author[1], author_line,
                      committer[0], committer[1], message)


# --------------------------------------------------------------- loose objects
def parse_batch(data: bytes, wanted: Iterable[str]) -> dict[str, bytes]:
    """``{id: content}`` from the output of ``git cat-file --batch`` given ``wanted``;
    KeyError naming the first object git reported missing."""
    result: dict[str, bytes] = {}
    pos = 0
    for sha in wanted:
        eol = data.index(b"\n", pos)
        header = data[pos:eol].split(b" ")
        if header[-1] == b"missing":
            raise KeyError(sha)
        size = int(header[2])
        result[sha] = data[eol + 1 : eol + 1 + size]
        pos = eol + 2 + size
    return result


def loose_level(config_z: bytes) -> int | None:
    """The zlib level git uses for loose objects, from ``git config -z --get-regexp
    WRITER_CONFIG``; None when git must write them itself (shared-repository
    permissions, fsync, a non-SHA-1 repository, a level out of range)."""
    found = {}
    for item in config_z.decode("utf-8", "replace").split("\0"):
        key, _, value = item.partition("\n")
        if key:
            found[key.lower()] = value.strip()
    level: int | None = 1  # git's default for loose objects: Z_BEST_SPEED
    try:
        for key in ("core.compression", "core.loosecompression"):  # the latter wins
            if key in found:
                level = int(found.pop(key))
                if not -1 <= level <= 9:
                    return None
    except ValueError:
        return None
    if found.get("extensions.objectformat", "sha1").lower() == "sha1":
        found.pop("extensions.objectformat", None)
    return None if found else level


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
