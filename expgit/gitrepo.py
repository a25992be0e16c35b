"""The git facade: the only module that imports GitPython.

Everything expgit knows is read from git objects and refs, and everything it writes is
built in the object database (blobs, trees, commits) and published by moving refs with
compare-and-swap (``git update-ref --stdin``, one atomic transaction). Nothing here ever
builds a commit through the user's index or working tree, so bare repositories work.

Reads of single objects go through GitPython's persistent ``cat-file`` process; bulk reads
use one ``git cat-file --batch`` run; blobs and trees are written as loose objects (see
:meth:`GitRepo._store`), commits by ``git commit-tree`` (git fills in the identity).
Porcelain-free plumbing commands run through :meth:`GitRepo.run`.

Every process spawn costs milliseconds, so the hot paths avoid them where git's on-disk
format makes that exact and cheap:

* refs of the ``files`` backend are read straight from the loose ref files and
  ``packed-refs`` (loose first, then packed, as git does; both are replaced atomically by
  rename, so a read sees the old or the new value). Anything else (per-worktree refs,
  revision expressions, another ref backend) goes through ``git rev-parse``;
* a commit is created by one ``git commit-tree`` (not ``git var`` twice and a write);
* parsed trees and commits, the blobs written or read one by one, and the differences
  between two trees are cached by object id, which names immutable content, so a cache
  hit can never be stale. An edit of
  a large tree splices the raw bytes of the cached tree instead of serialising every
  entry again, and a tree that differs from a cached one by a few object ids is parsed
  by comparison with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import subprocess
import threading
import time
import zlib
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import NamedTuple

import git

from expgit.errors import ConflictError, GitError, UsageError

ZERO_SHA = "0" * 40
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_TREE_MODE = "40000"
_FALLBACK_IDENT = "expgit <expgit@localhost>"


_TREE_CACHE_ENTRIES = 400_000  # parsed tree entries kept (about 40 trees of 10k entries)
_COMMIT_CACHE = 4096
_DIFF_CACHE = 256  # tree pairs whose differing entries are kept
_DIFF_CACHE_PAIRS = 1024  # larger differences are not kept
_BLOB_CACHE_BYTES = 16 * 1024 * 1024  # blobs this process wrote or read one by one
_BLOB_CACHE_MAX = 1024 * 1024  # larger blobs are not kept
# settings that change how git writes a loose object; any of them set (other than the
# compression level): let git write it
_WRITER_CONFIG = (r"^(core\.(sharedrepository|fsync|fsyncobjectfiles|loosecompression"
                  r"|compression)|extensions\.objectformat)$")
_TREE_ENTRY_RE = re.compile(rb"([0-7]+) ([^\0]*)\0(.{20})", re.DOTALL)
_HEX = frozenset("0123456789abcdef")
# refs that live in each worktree's own git dir, not in the common dir
_PER_WORKTREE_REFS = ("refs/bisect/", "refs/worktree/", "refs/rewritten/")
_BAD_REF_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock/|\.lock$|[/.]$")


class TreeEntry(NamedTuple):
    mode: str
    name: str
    sha: str

    @property
    def is_tree(self) -> bool:
        return self.mode == _TREE_MODE


@dataclass(slots=True)
class _Tree:
    """A parsed tree: its entries in git's order, its raw bytes and, once needed, the
    byte offset of each entry in them (plus the end), so an edit can splice bytes."""

    entries: list[TreeEntry]
    raw: bytes
    offsets: array[int] | None = None
    index: dict[str, TreeEntry] | None = None


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


@dataclass(frozen=True, slots=True)
class RefUpdate:
    """One ref move of an atomic transaction. ``old`` None: must not exist (create);
    ``new`` None: delete. ``old`` given: the ref must still point there (CAS)."""

    ref: str
    new: str | None
    old: str | None


class RefMovedError(ConflictError):
    """A compare-and-swap failed: a ref was not where the writer expected it."""


def _tree_sort_key(entry: TreeEntry) -> bytes:
    name = entry.name.encode("utf-8", "surrogateescape")
    return name + b"/" if entry.is_tree else name


def _entry_bytes(entry: TreeEntry) -> bytes:
    return (entry.mode.encode() + b" " + entry.name.encode("utf-8", "surrogateescape") + b"\0"
            + bytes.fromhex(entry.sha))


def _is_sha(text: str) -> bool:
    return len(text) in (40, 64) and _HEX.issuperset(text)


def _parse_like(data: bytes, base: _Tree) -> _Tree | None:
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
    return _Tree(entries if result is None else result, data, offsets)


class GitRepo:
    """A git repository (bare or not) seen through plumbing only."""

    def __init__(self, repo: git.Repo) -> None:
        self._repo = repo
        self.git_dir = Path(repo.git_dir).resolve()
        self.common_dir = Path(repo.common_dir).resolve()
        self._common = str(self.common_dir)
        self.is_bare = bool(repo.bare)
        self.work_tree = None if self.is_bare else Path(str(repo.working_tree_dir)).resolve()
        # caches keyed by object id: the content an id names never changes
        self._trees: OrderedDict[str, _Tree] = OrderedDict()
        self._tree_entries = 0
        self._commits: OrderedDict[str, CommitInfo] = OrderedDict()
        self._diffs: OrderedDict[tuple[str | None, str | None],
                                 list[tuple[TreeEntry | None, TreeEntry | None]]] = OrderedDict()
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._blob_bytes = 0
        self._loose_level: tuple[int | None] | None = None  # looked up on the first write
        self._cache_lock = threading.Lock()
        # the files ref backend (loose refs + packed-refs) can be read without a process
        self._files_refs = ((self.common_dir / "refs" / "heads").is_dir()
                            and not (self.common_dir / "reftable").exists())

    # ----------------------------------------------------------------- opening
    @classmethod
    def discover(cls, path: str | os.PathLike[str] = ".") -> GitRepo:
        try:
            return cls(git.Repo(path, search_parent_directories=True))
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise UsageError(
                f"not a git repository: {Path(path).resolve()}",
                hint="run inside an experience repository, pass -C DIR, or `expgit init`",
            ) from None

    @classmethod
    def init(cls, path: Path, *, bare: bool, branch: str) -> GitRepo:
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "init", "-q", f"--initial-branch={branch}", *(["--bare"] if bare else []),
             str(path)],
            check=True, capture_output=True,
        )
        return cls(git.Repo(path))

    def close(self) -> None:
        self._repo.close()

    # ----------------------------------------------------------------- running
    def run(
        self,
        *args: str,
        input: bytes | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        cwd = cwd or self.work_tree or self.git_dir
        full_env = {**os.environ, **env} if env else None
        proc = subprocess.run(
            ["git", "-c", "core.quotepath=off", *args],
            input=input, capture_output=True, cwd=cwd, env=full_env,
        )
        if check and proc.returncode != 0:
            raise GitError(
                f"git {' '.join(args[:3])} failed: "
                + (proc.stderr.decode(errors="replace").strip() or f"exit {proc.returncode}")
            )
        return proc

    def out(self, *args: str, input: bytes | None = None) -> str:
        return self.run(*args, input=input).stdout.decode()

    # -------------------------------------------------------------------- refs
    def resolve(self, rev: str) -> str | None:
        """The commit a revision names, or None if it names no commit."""
        if not rev or rev.startswith("-"):
            return None
        if len(rev) == 40 and _HEX.issuperset(rev):  # a full commit id: the cat-file process
            try:
                kind = self._repo.odb.info(bytes.fromhex(rev)).type
            except (ValueError, git.BadName, git.BadObject):
                return None  # no such object
            if kind == b"commit":
                return rev
        proc = self.run("rev-parse", "--verify", "--quiet", "--end-of-options",
                        f"{rev}^{{commit}}", check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def _readable_ref(self, name: str) -> bool:
        """Whether ``name`` is a shared ref this process can read from the files backend."""
        return (self._files_refs and name.startswith("refs/")
                and not name.startswith(_PER_WORKTREE_REFS)
                and _BAD_REF_CHARS.search(name) is None)

    def _packed_refs(self) -> dict[str, str]:
        try:
            text = (self.common_dir / "packed-refs").read_text("utf-8", "surrogateescape")
        except (FileNotFoundError, NotADirectoryError):
            return {}
        found = {}
        for line in text.splitlines():
            if line and line[0] not in "#^":
                sha, _, name = line.partition(" ")
                found[name] = sha
        return found

    def _loose_ref(self, name: str) -> str | None:
        """The raw content of a loose ref file, None if there is no such file."""
        try:
            fd = os.open(os.path.join(self._common, name), os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            chunks = []
            while chunk := os.read(fd, 4096):
                chunks.append(chunk)
        except IsADirectoryError:
            return None
        finally:
            os.close(fd)
        return b"".join(chunks).decode("utf-8", "surrogateescape").strip()

    def _read_ref(self, name: str, packed: dict[str, str] | None = None) -> str | None:
        """Resolve a ref through the files backend; raises LookupError when it cannot
        (a symbolic ref pointing out of the shared refs, a malformed ref file)."""
        for _ in range(5):  # symbolic refs, as deep as git follows them
            value = self._loose_ref(name)
            if value is None:
                value = (packed if packed is not None else self._packed_refs()).get(name)
                if value is None:
                    return None
            if value.startswith("ref:"):
                name = value[4:].strip()
                if not self._readable_ref(name):
                    raise LookupError(name)
                continue
            if _is_sha(value):
                return value
            raise LookupError(name)
        raise LookupError(name)

    def ref(self, ref: str) -> str | None:
        if self._readable_ref(ref):
            try:
                return self._read_ref(ref)
            except LookupError:
                pass  # let git decide
        proc = self.run("rev-parse", "--verify", "--quiet", ref, check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def refs(self, prefix: str) -> dict[str, str]:
        """``{ref: object}`` for the refs below ``prefix`` (ending in ``/``), by name."""
        if prefix.endswith("/") and self._readable_ref(prefix[:-1]):
            try:
                return self._list_refs(prefix)
            except LookupError:
                pass
        text = self.out("for-each-ref", "--format=%(objectname) %(refname)", prefix)
        pairs = (line.split(" ", 1) for line in text.splitlines() if line)
        return {name: sha for sha, name in pairs}

    def _list_refs(self, prefix: str) -> dict[str, str]:
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
                        elif _BAD_REF_CHARS.search(name) is None:  # skips *.lock files
                            loose.append(name)
            except (FileNotFoundError, NotADirectoryError):
                continue
        packed = self._packed_refs()
        found = {}
        for name in loose:  # a ref this cannot read (LookupError): git lists them all
            sha = self._read_ref(name, packed)
            if sha is not None:
                found[name] = sha
        for name, sha in packed.items():  # a loose ref overrides its packed value
            if name.startswith(prefix) and name not in found:
                found[name] = sha
        return dict(sorted(found.items()))

    def update_refs(self, updates: Sequence[RefUpdate], message: str) -> None:
        """Apply all updates in one atomic transaction, or none (RefMovedError)."""
        lines = []
        for u in updates:
            if u.new is None:
                lines.append(f"delete {u.ref} {u.old or ''}".rstrip())
            else:
                lines.append(f"update {u.ref} {u.new} {u.old or ZERO_SHA}")
        proc = self.run("update-ref", "-m", message, "--stdin",
                        input=("\n".join(lines) + "\n").encode(), check=False)
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()
            raise RefMovedError(f"a ref moved under this write, nothing was changed ({err})",
                                hint="run the command again; it re-reads the current state")

    def head_symref(self) -> str | None:
        if self._files_refs:
            try:
                head = (self.git_dir / "HEAD").read_text("utf-8", "surrogateescape").strip()
            except OSError:
                head = ""
            if head.startswith("ref:"):
                return head[4:].strip() or None
            if _is_sha(head):
                return None  # detached
        proc = self.run("symbolic-ref", "-q", "HEAD", check=False)
        return proc.stdout.decode().strip() or None

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        proc = self.run("merge-base", "--is-ancestor", ancestor, descendant, check=False)
        return proc.returncode == 0

    # ----------------------------------------------------------------- objects
    def _raw(self, sha: str) -> bytes:
        try:
            return bytes(self._repo.odb.stream(bytes.fromhex(sha)).read())
        except (ValueError, git.BadName, git.BadObject) as exc:
            raise GitError(f"object {sha} cannot be read: {exc}") from None

    def _keep_blob(self, sha: str, data: bytes) -> None:
        if len(data) > _BLOB_CACHE_MAX:
            return
        with self._cache_lock:
            if sha in self._blobs:
                return
            self._blobs[sha] = data
            self._blob_bytes += len(data)
            while self._blob_bytes > _BLOB_CACHE_BYTES:
                self._blob_bytes -= len(self._blobs.popitem(last=False)[1])

    def read_blob(self, sha: str) -> bytes:
        data = self._blobs.get(sha)
        if data is None:
            data = self._raw(sha)
            if _is_sha(sha):
                self._keep_blob(sha, data)
        return data

    def read_blobs(self, shas: Iterable[str]) -> dict[str, bytes]:
        """Read many blobs with one ``git cat-file --batch`` run."""
        wanted = list(dict.fromkeys(shas))
        if len(wanted) <= 16:
            return {sha: self.read_blob(sha) for sha in wanted}
        # --buffer: one write per buffer-full instead of a flush per object
        data = self.run("cat-file", "--batch", "--buffer",
                        input=("\n".join(wanted) + "\n").encode()).stdout
        result: dict[str, bytes] = {}
        pos = 0
        for sha in wanted:
            eol = data.index(b"\n", pos)
            header = data[pos:eol].split(b" ")
            if header[-1] == b"missing":
                raise GitError(f"blob {sha} is missing from the object database")
            size = int(header[2])
            result[sha] = data[eol + 1 : eol + 1 + size]
            pos = eol + 2 + size
        return result

    def _cache_tree(self, sha: str, tree: _Tree) -> None:
        with self._cache_lock:
            if sha in self._trees:
                return
            self._trees[sha] = tree
            self._tree_entries += len(tree.entries) + 1
            while self._tree_entries > _TREE_CACHE_ENTRIES and len(self._trees) > 1:
                self._tree_entries -= len(self._trees.popitem(last=False)[1].entries) + 1

    def _tree(self, sha: str, like: str | None = None) -> _Tree:
        """The parsed tree ``sha``; ``like`` names a cached tree it probably resembles
        (the same tree before a few edits), which makes parsing it nearly free."""
        with self._cache_lock:
            cached = self._trees.get(sha)
            if cached is not None:
                self._trees.move_to_end(sha)
                return cached
        data = self._raw(sha)
        base = self._trees.get(like) if like else None
        tree = _parse_like(data, base) if base is not None else None
        if tree is None:
            found = _TREE_ENTRY_RE.findall(data)
            modes: dict[bytes, str] = {}
            entries = [TreeEntry(modes.get(mode) or modes.setdefault(mode, mode.decode()),
                                 name.decode("utf-8", "surrogateescape"), raw.hex())
                       for mode, name, raw in found]
            offsets = array("q", accumulate(
                (len(mode) + len(name) + 22 for mode, name, _ in found), initial=0))
            if offsets[-1] != len(data):
                raise GitError(f"tree {sha} cannot be parsed")
            tree = _Tree(entries, data, offsets)
        self._cache_tree(sha, tree)
        return tree

    def read_tree(self, sha: str) -> list[TreeEntry]:
        return self._tree(sha).entries

    def tree_index(self, sha: str) -> dict[str, TreeEntry]:
        """``{name: entry}`` of a tree (cached with the tree)."""
        tree = self._tree(sha)
        if tree.index is None:
            tree.index = {e.name: e for e in tree.entries}
        return tree.index

    def read_commit(self, sha: str) -> CommitInfo:
        cached = self._commits.get(sha)
        if cached is not None:
            return cached
        raw = self._raw(sha).decode("utf-8", "replace")
        header, _, message = raw.partition("\n\n")
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
        info = CommitInfo(sha, tree, tuple(parents), author[0], author[1], author_line,
                          committer[0], committer[1], message)
        if _is_sha(sha):  # only a full id names one object forever
            with self._cache_lock:
                self._commits[sha] = info
                if len(self._commits) > _COMMIT_CACHE:
                    self._commits.popitem(last=False)
        return info

    def path_entry(self, tree: str, path: str) -> TreeEntry | None:
        """The entry at ``path`` (slash separated) below ``tree``, or None."""
        entry: TreeEntry | None = TreeEntry(_TREE_MODE, "", tree)
        for part in (p for p in path.split("/") if p):
            if entry is None or not entry.is_tree:
                return None
            entry = self.tree_index(entry.sha).get(part)
        return entry

    def diff_trees(self, old: str | None, new: str | None
                   ) -> list[tuple[TreeEntry | None, TreeEntry | None]]:
        """The entries of two trees (None: the empty tree) that differ, one level deep, as
        (old, new) pairs in tree order; an entry only one side has is paired with None (so
        a name that turned from a tree into a file, or back, comes as two pairs)."""
        if old == new:
            return []
        key = (old, new)
        cached = self._diffs.get(key)
        if cached is None:
            cached = self._diff_trees(old, new)
            if len(cached) > _DIFF_CACHE_PAIRS:
                return cached
            with self._cache_lock:
                self._diffs[key] = cached
                if len(self._diffs) > _DIFF_CACHE:
                    self._diffs.popitem(last=False)
        return list(cached)

    def _diff_trees(self, old: str | None, new: str | None
                    ) -> list[tuple[TreeEntry | None, TreeEntry | None]]:
        before = self.read_tree(old) if old else []
        after = self._tree(new, like=old).entries if new else []
        if len(before) == len(after):  # the common case, edits only: compare in step
            pairs = [(b, a) for b, a in zip(before, after, strict=True)
                     if b is not a and b != a]
            if all(b.name == a.name and b.is_tree == a.is_tree for b, a in pairs):
                return [(b, a) for b, a in pairs]
        result: list[tuple[TreeEntry | None, TreeEntry | None]] = []
        i = j = 0
        while i < len(before) and j < len(after):
            b, a = before[i], after[j]
            if b == a:
                i, j = i + 1, j + 1
            elif b.name == a.name and b.is_tree == a.is_tree:
                result.append((b, a))
                i, j = i + 1, j + 1
            elif _tree_sort_key(b) < _tree_sort_key(a):
                result.append((b, None))
                i += 1
            else:
                result.append((None, a))
                j += 1
        result += [(b, None) for b in before[i:]]
        result += [(None, a) for a in after[j:]]
        return result

    def _writer_level(self) -> int | None:
        """The zlib level git uses for loose objects here, or None when git must write
        them itself (shared-repository permissions, fsync, a non-SHA-1 repository)."""
        if self._loose_level is None:
            proc = self.run("config", "-z", "--get-regexp", _WRITER_CONFIG, check=False)
            found = {}
            for item in proc.stdout.decode("utf-8", "replace").split("\0"):
                key, _, value = item.partition("\n")
                if key:
                    found[key.lower()] = value.strip()
            level: int | None = 1  # git's default for loose objects: Z_BEST_SPEED
            try:
                for key in ("core.compression", "core.loosecompression"):  # the latter wins
                    if key in found:
                        level = int(found.pop(key))
                        if not -1 <= level <= 9:
                            level = None
                            break
            except ValueError:
                level = None
            if found.get("extensions.objectformat", "sha1").lower() == "sha1":
                found.pop("extensions.objectformat", None)
            self._loose_level = (None if found else level,)
        return self._loose_level[0]

    def _store(self, kind: bytes, data: bytes) -> str:
        """Write one object as git's ``write_object_file`` does, without a process.

        Its id is the SHA-1 of ``<kind> <size>\\0<data>``. An object already stored
        loose is only freshened (its mtime, which ``git gc`` reads); otherwise the zlib
        stream is written to a ``tmp_obj_*`` file (mode 0444 less the umask) next to its
        final name and hard-linked into place (renamed where links are not supported),
        so a reader never sees a partial object. When the repository asks for anything
        else (shared permissions, fsync, SHA-256, a quarantine during a push), git
        writes it: ``git hash-object -w``."""
        level = self._writer_level()
        if level is None or "GIT_OBJECT_DIRECTORY" in os.environ \
                or "GIT_QUARANTINE_PATH" in os.environ:
            return self.out("hash-object", "-t", kind.decode(), "-w", "--stdin", "--literally",
                            input=data).strip()
        header = b"%s %d\0" % (kind, len(data))
        digest = hashlib.sha1(header)
        digest.update(data)
        sha = digest.hexdigest()
        folder = os.path.join(self.common_dir, "objects", sha[:2])
        final = os.path.join(folder, sha[2:])
        try:
            os.utime(final)
            return sha
        except OSError:
            pass  # not there (or not ours to touch): write it
        compressor = zlib.compressobj(level)
        payload = compressor.compress(header) + compressor.compress(data) + compressor.flush()
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f"tmp_obj_{secrets.token_hex(8)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
            try:
                os.link(tmp, final)
            except FileExistsError:
                pass  # written meanwhile by someone else: same id, same content
            except OSError:
                os.replace(tmp, final)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return sha

    def write_blob(self, data: bytes) -> str:
        sha = self._store(b"blob", data)
        self._keep_blob(sha, data)
        return sha

    def write_tree(self, entries: Iterable[TreeEntry]) -> str:
        return self._write_sorted_tree(sorted(entries, key=_tree_sort_key))

    def _write_sorted_tree(self, ordered: list[TreeEntry], raw: bytes | None = None) -> str:
        if raw is None:
            raw = b"".join(map(_entry_bytes, ordered))
        sha = self._store(b"tree", raw)
        self._cache_tree(sha, _Tree(ordered, raw))
        return sha

    def edit_tree(self, tree: str | None, changes: Mapping[str, str | None]) -> str:
        """A new tree: ``tree`` with each path set to a blob sha (mode 100644) or removed
        (None). Intermediate trees are created or dropped as needed."""
        index = self.tree_index(tree) if tree else {}
        nested: dict[str, dict[str, str | None]] = {}
        edits: dict[str, TreeEntry | None] = {}
        for path, blob in changes.items():
            head, _, rest = path.strip("/").partition("/")
            if rest:
                nested.setdefault(head, {})[rest] = blob
            else:
                edits[head] = None if blob is None else TreeEntry("100644", head, blob)
        for name, sub in nested.items():
            current = edits[name] if name in edits else index.get(name)
            subtree = self.edit_tree(current.sha if current and current.is_tree else None, sub)
            edits[name] = None if subtree == EMPTY_TREE else TreeEntry(_TREE_MODE, name, subtree)
        if tree is None:
            entries = sorted((e for e in edits.values() if e is not None), key=_tree_sort_key)
            return self._write_sorted_tree(entries) if entries else EMPTY_TREE
        spliced = self._splice(self._tree(tree), edits)
        if spliced is None:  # not in git's order, or a name twice: rebuild it whole
            merged = {e.name: e for e in self._tree(tree).entries}
            for name, new in edits.items():
                if new is None:
                    merged.pop(name, None)
                else:
                    merged[name] = new
            return self.write_tree(merged.values()) if merged else EMPTY_TREE
        entries, raw = spliced
        return self._write_sorted_tree(entries, raw) if entries else EMPTY_TREE

    @staticmethod
    def _splice(tree: _Tree, edits: Mapping[str, TreeEntry | None]
                ) -> tuple[list[TreeEntry], bytes] | None:
        """The entries and raw bytes of ``tree`` with each edited name replaced, added or
        dropped: binary searches for the edited names, then slices of the unchanged runs,
        instead of sorting and serialising every entry again."""
        entries = tree.entries
        if tree.index is None:
            tree.index = {e.name: e for e in entries}
        if len(tree.index) != len(entries):
            return None
        # (position in the old entries, 0 insert / 1 replace or drop, sort key, new entry)
        ops: list[tuple[int, int, bytes, TreeEntry | None]] = []
        for name, new in edits.items():
            old = tree.index.get(name)
            if old is not None:
                key = _tree_sort_key(old)
                pos = bisect_left(entries, key, key=_tree_sort_key)
                if pos == len(entries) or entries[pos] != old:
                    return None
                if new is not None and new.is_tree == old.is_tree:
                    ops.append((pos, 1, key, new))
                    continue
                ops.append((pos, 1, key, None))
            if new is not None:
                key = _tree_sort_key(new)
                ops.append((bisect_left(entries, key, key=_tree_sort_key), 0, key, new))
        if tree.offsets is None:
            tree.offsets = array("q", accumulate(
                (len(e.mode) + len(e.name.encode("utf-8", "surrogateescape")) + 22
                 for e in entries), initial=0))
        offsets, raw = tree.offsets, tree.raw
        new_entries: list[TreeEntry] = []
        pieces: list[bytes] = []
        cursor = 0
        for pos, kind, _, new in sorted(ops, key=lambda op: op[:3]):
            new_entries += entries[cursor:pos]
            pieces.append(raw[offsets[cursor]:offsets[pos]])
            cursor = pos + kind  # a replaced or dropped entry is skipped
            if new is not None:
                new_entries.append(new)
                pieces.append(_entry_bytes(new))
        new_entries += entries[cursor:]
        pieces.append(raw[offsets[cursor]:])
        return new_entries, b"".join(pieces)

    def identity(self, kind: str = "AUTHOR") -> str:
        """``Name <email> <time> <tz>`` as git would record it; a neutral fallback when
        the machine has no identity configured (CI)."""
        proc = self.run("var", f"GIT_{kind}_IDENT", check=False)
        text = proc.stdout.decode().strip()
        if proc.returncode == 0 and text:
            return text
        offset = -time.timezone if not time.localtime().tm_isdst else -time.altzone
        sign = "+" if offset >= 0 else "-"
        tz = f"{sign}{abs(offset) // 3600:02d}{abs(offset) % 3600 // 60:02d}"
        return f"{_FALLBACK_IDENT} {int(time.time())} {tz}"

    def write_commit(self, tree: str, parents: Sequence[str], message: str, *,
                     author: str | None = None) -> str:
        body = message if message.endswith("\n") else message + "\n"
        if author is None and len(set(parents)) == len(parents):
            # one process: git fills in author and committer exactly as `git var` would
            # (same strict identity rules, same clock); no signing, UTF-8 as written below
            proc = self.run("-c", "i18n.commitEncoding=UTF-8", "commit-tree", "--no-gpg-sign",
                            *(arg for p in parents for arg in ("-p", p)), tree,
                            input=body.encode(), check=False)
            sha = proc.stdout.decode().strip()
            if proc.returncode == 0 and _is_sha(sha):
                return sha
            # no identity configured (or a bad tree): the path below decides
        if self.path_entry(tree, "") is None:  # pragma: no cover - defensive
            raise GitError(f"tree {tree} does not exist")
        lines = [f"tree {tree}", *(f"parent {p}" for p in parents),
                 f"author {author or self.identity('AUTHOR')}",
                 f"committer {self.identity('COMMITTER')}"]
        return self._store(b"commit", ("\n".join(lines) + "\n\n" + body).encode())
