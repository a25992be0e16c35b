"""The git facade: the only module that imports GitPython.

Everything expgit knows is read from git objects and refs, and everything it writes is
built in the object database (blobs, trees, commits) and published by moving refs with
compare-and-swap (``git update-ref --stdin``, one atomic transaction). Nothing here ever
builds a commit through the user's index or working tree, so bare repositories work.

Reads of single objects go through GitPython's persistent ``cat-file`` process; bulk reads
use one ``git cat-file --batch`` run; writes of loose objects go through GitPython's object
database. Porcelain-free plumbing commands run through :meth:`GitRepo.run`.
"""

from __future__ import annotations

import io
import os
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import git
from gitdb import IStream

from expgit.errors import ConflictError, GitError, UsageError

ZERO_SHA = "0" * 40
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_TREE_MODE = "40000"
_FALLBACK_IDENT = "expgit <expgit@localhost>"


@dataclass(frozen=True, slots=True)
class TreeEntry:
    mode: str
    name: str
    sha: str

    @property
    def is_tree(self) -> bool:
        return self.mode == _TREE_MODE


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
    name = entry.name.encode()
    return name + b"/" if entry.is_tree else name


class GitRepo:
    """A git repository (bare or not) seen through plumbing only."""

    def __init__(self, repo: git.Repo) -> None:
        self._repo = repo
        self.git_dir = Path(repo.git_dir).resolve()
        self.common_dir = Path(repo.common_dir).resolve()
        self.is_bare = bool(repo.bare)
        self.work_tree = None if self.is_bare else Path(str(repo.working_tree_dir)).resolve()
        self._trees: dict[str, list[TreeEntry]] = {}

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
        proc = self.run("rev-parse", "--verify", "--quiet", "--end-of-options",
                        f"{rev}^{{commit}}", check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def ref(self, ref: str) -> str | None:
        proc = self.run("rev-parse", "--verify", "--quiet", ref, check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def refs(self, prefix: str) -> dict[str, str]:
        text = self.out("for-each-ref", "--format=%(objectname) %(refname)", prefix)
        pairs = (line.split(" ", 1) for line in text.splitlines() if line)
        return {name: sha for sha, name in pairs}

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

    def read_blob(self, sha: str) -> bytes:
        return self._raw(sha)

    def read_blobs(self, shas: Iterable[str]) -> dict[str, bytes]:
        """Read many blobs with one ``git cat-file --batch`` run."""
        wanted = list(dict.fromkeys(shas))
        if len(wanted) <= 16:
            return {sha: self._raw(sha) for sha in wanted}
        data = self.run("cat-file", "--batch", input=("\n".join(wanted) + "\n").encode()).stdout
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

    def read_tree(self, sha: str) -> list[TreeEntry]:
        cached = self._trees.get(sha)
        if cached is not None:
            return cached
        data = self._raw(sha)
        entries: list[TreeEntry] = []
        pos = 0
        while pos < len(data):
            space = data.index(b" ", pos)
            nul = data.index(b"\0", space)
            entries.append(TreeEntry(data[pos:space].decode(),
                                     data[space + 1 : nul].decode("utf-8", "surrogateescape"),
                                     data[nul + 1 : nul + 21].hex()))
            pos = nul + 21
        if len(self._trees) > 4096:
            self._trees.clear()
        self._trees[sha] = entries
        return entries

    def read_commit(self, sha: str) -> CommitInfo:
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
        return CommitInfo(sha, tree, tuple(parents), author[0], author[1], author_line,
                          committer[0], committer[1], message)

    def path_entry(self, tree: str, path: str) -> TreeEntry | None:
        """The entry at ``path`` (slash separated) below ``tree``, or None."""
        entry: TreeEntry | None = TreeEntry(_TREE_MODE, "", tree)
        for part in (p for p in path.split("/") if p):
            if entry is None or not entry.is_tree:
                return None
            entry = next((e for e in self.read_tree(entry.sha) if e.name == part), None)
        return entry

    def _store(self, kind: bytes, data: bytes) -> str:
        istream = self._repo.odb.store(IStream(kind, len(data), io.BytesIO(data)))
        return str(istream.hexsha.decode() if isinstance(istream.hexsha, bytes)
                   else istream.hexsha)

    def write_blob(self, data: bytes) -> str:
        return self._store(b"blob", data)

    def write_tree(self, entries: Iterable[TreeEntry]) -> str:
        ordered = sorted(entries, key=_tree_sort_key)
        data = b"".join(f"{e.mode} ".encode() + e.name.encode("utf-8", "surrogateescape")
                        + b"\0" + bytes.fromhex(e.sha) for e in ordered)
        sha = self._store(b"tree", data)
        self._trees[sha] = ordered
        return sha

    def edit_tree(self, tree: str | None, changes: Mapping[str, str | None]) -> str:
        """A new tree: ``tree`` with each path set to a blob sha (mode 100644) or removed
        (None). Intermediate trees are created or dropped as needed."""
        entries = {e.name: e for e in (self.read_tree(tree) if tree else [])}
        nested: dict[str, dict[str, str | None]] = {}
        for path, blob in changes.items():
            head, _, rest = path.strip("/").partition("/")
            if rest:
                nested.setdefault(head, {})[rest] = blob
            elif blob is None:
                entries.pop(head, None)
            else:
                entries[head] = TreeEntry("100644", head, blob)
        for name, sub in nested.items():
            current = entries.get(name)
            subtree = self.edit_tree(current.sha if current and current.is_tree else None, sub)
            if subtree == EMPTY_TREE:
                entries.pop(name, None)
            else:
                entries[name] = TreeEntry(_TREE_MODE, name, subtree)
        return self.write_tree(entries.values()) if entries else EMPTY_TREE

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
        if self.path_entry(tree, "") is None:  # pragma: no cover - defensive
            raise GitError(f"tree {tree} does not exist")
        lines = [f"tree {tree}", *(f"parent {p}" for p in parents),
                 f"author {author or self.identity('AUTHOR')}",
                 f"committer {self.identity('COMMITTER')}"]
        body = message if message.endswith("\n") else message + "\n"
        return self._store(b"commit", ("\n".join(lines) + "\n\n" + body).encode())
