"""The git facade: the only module that imports GitPython.

Everything expgit knows is read from git objects and refs, and everything it writes is
built in the object database (blobs, trees, commits) and published by moving refs with
compare-and-swap (one atomic transaction under git's ref locks). Nothing here ever
builds a commit through the user's index or working tree, so bare repositories work.

A process costs milliseconds, so the hot paths avoid them where git's formats make that
exact and cheap; :class:`GitRepo` wires together the parts that start none:
:mod:`expgit.git.objects` (object formats; commits as ``git commit-tree`` writes them),
gitdb's loose object database (GitPython's own: loose objects read and written without a
process; ``git hash-object`` costs 5 ms an object, gitdb 0.2 ms, docs/development.md),
:mod:`expgit.git.ident` (identities and the writer setting, asked of git once),
:mod:`expgit.git.repo_refs` (the ref reads of :class:`GitRepo`) over
:mod:`expgit.git.refs` (loose refs, ``packed-refs``), :mod:`expgit.git.reftx` (ref
transactions: ``git update-ref --stdin``), :mod:`expgit.git.idcache` and
:mod:`expgit.git.env` (the environment of git processes: always this repository, whatever
the shell exported). Other objects are read through GitPython's persistent ``cat-file``
(one request at a time: threads may share a GitRepo), or by one ``cat-file --batch``.
Parsed trees and commits, blobs and tree differences are cached by object id (a hit is
never stale). What the repository asks beyond these shortcuts (shared permissions, fsync,
SHA-256, a push quarantine, a message git would rewrite), git does itself.
"""

from __future__ import annotations

import io
import os
import subprocess
import threading
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import git
from gitdb import IStream
from gitdb.db.loose import LooseObjectDB
from gitdb.exc import BadObject

from expgit.errors import GitError, UsageError
from expgit.git import objects
from expgit.git.env import RepoEnv, inherited_repository, without_repository
from expgit.git.idcache import IdCache
from expgit.git.ident import Identities, WriterSettings
from expgit.git.maintenance import Target, Watch
from expgit.git.objects import EMPTY_TREE, TREE_MODE, ZERO_SHA, CommitInfo, Pair, Tree, TreeEntry
from expgit.git.operands import END_OF_OPTIONS
from expgit.git.refs import FilesRefs, RefMovedError, RefUpdate
from expgit.git.reftx import RefWriter
from expgit.git.repo_refs import RepoRefs

__all__ = ["EMPTY_TREE", "ZERO_SHA", "CommitInfo", "GitRepo", "RefMovedError", "RefUpdate",
           "TreeEntry"]

_TREE_CACHE_ENTRIES = 400_000  # parsed tree entries kept (about 40 trees of 10k entries)
_COMMIT_CACHE = 4096
_DIFF_CACHE = 256  # tree pairs whose differing entries are kept
_DIFF_CACHE_PAIRS = 1024  # larger differences are not kept
_BLOB_CACHE_BYTES = 16 * 1024 * 1024  # blobs this process wrote or read one by one
_BLOB_CACHE_MAX = 1024 * 1024  # larger blobs are not kept


def _find_git_dir(path: str) -> Path | None:
    """The git dir GitPython finds from ``path`` upwards, None if there is none."""
    try:
        return Path(git.Repo(path, search_parent_directories=True).git_dir).resolve()
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None


def _layout(git_dir: Path) -> tuple[Path, Path | None]:
    """(common dir, work tree or None if bare) of ``git_dir`` from its files alone, as
    GitPython finds them when no variable says otherwise."""
    try:
        common = (git_dir / (git_dir / "commondir").read_text().strip()).resolve()
    except OSError:
        common = git_dir
    gitfile = git_dir / "gitdir"
    if common != git_dir and gitfile.is_file():  # a linked worktree: never bare
        return common, (git_dir / gitfile.read_text().strip()).resolve().parent
    config = git.GitConfigParser(str(common / "config"), read_only=True)
    if config.get_value("core", "bare", False) is True:
        return common, None
    worktree = str(config.get_value("core", "worktree", ""))
    return common, (git_dir / worktree).resolve() if worktree else git_dir.parent


class GitRepo(RepoRefs):
    """A git repository (bare or not) seen through plumbing only; safe to share between
    threads. Its refs are read and moved by :class:`~expgit.git.repo_refs.RepoRefs`."""

    def __init__(self, repo: git.Repo) -> None:
        self._repo = repo
        self.git_dir = Path(repo.git_dir).resolve()
        inherited = inherited_repository(os.environ, _find_git_dir)
        foreign = inherited is not None and inherited != self.git_dir
        if foreign:  # GitPython may have taken GIT_WORK_TREE, GIT_COMMON_DIR from them
            self.common_dir, self.work_tree = _layout(self.git_dir)
        else:
            self.common_dir = Path(repo.common_dir).resolve()
            self.work_tree = None if repo.bare else Path(str(repo.working_tree_dir)).resolve()
        self.is_bare = self.work_tree is None
        self._env = RepoEnv(self.git_dir, self.common_dir, self.work_tree, foreign)
        self._home = self.work_tree or self.git_dir
        repo.git.update_environment(**self._env.persistent())
        self._odb_lock = threading.Lock()  # the persistent cat-file: one request at a time
        self._refs = FilesRefs(self.common_dir)
        # caches keyed by object id: the content an id names never changes
        self._trees: IdCache[Tree] = IdCache(_TREE_CACHE_ENTRIES,
                                             lambda tree: len(tree.entries) + 1)
        self._commits: IdCache[CommitInfo] = IdCache(_COMMIT_CACHE)
        self._diffs: IdCache[list[Pair]] = IdCache(_DIFF_CACHE)
        self._blobs: IdCache[bytes] = IdCache(_BLOB_CACHE_BYTES, len)
        self._objects_dir = str(self.common_dir / "objects")
        self._loose = LooseObjectDB(self._objects_dir)
        self.maintenance = Watch(Target(self.common_dir, Path(self._objects_dir),
                                        self._env.process))
        self._settings = WriterSettings(self.run)
        self._identities = Identities(self.run)
        self._ref_writer = RefWriter(self.run, self.common_dir, self.git_dir,
                                     self.head_symref)

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
            check=True, capture_output=True, env=without_repository(os.environ),
        )
        return cls(git.Repo(path))

    def close(self) -> None:
        with self._odb_lock:
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
        """Run ``git ARGS`` on this repository. ``cwd``: another work tree of it (such as
        a linked worktree to update) makes git find the repository from there."""
        other = cwd is not None and Path(cwd).resolve() != self._home
        full_env = self._env.process(other_worktree=other)
        if env:
            full_env.update(env)
        proc = subprocess.run(
            ["git", "-c", "core.quotepath=off", *args],
            input=input, capture_output=True, cwd=cwd or self._home, env=full_env,
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
        if len(rev) == 40 and objects.is_sha(rev):  # a full commit id: the cat-file process
            try:
                binsha = bytes.fromhex(rev)
                with self._odb_lock:
                    kind = self._repo.odb.info(binsha).type
            except (ValueError, git.BadName, git.BadObject):
                return None  # no such object
            if kind == b"commit":
                return rev
        proc = self.run("rev-parse", "--verify", "--quiet", END_OF_OPTIONS,
                        f"{rev}^{{commit}}", check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    # ------------------------------------------------------------ reading objects
    def _raw(self, sha: str) -> bytes:
        if objects.is_sha(sha):  # stored loose: read from its file, else cat-file
            try:
                return bytes(self._loose.stream(bytes.fromhex(sha)).read())
            except (BadObject, OSError, ValueError, zlib.error):
                pass
        try:
            binsha = bytes.fromhex(sha)
            with self._odb_lock:  # the whole object is read before the next request
                return bytes(self._repo.odb.stream(binsha).read())
        except (ValueError, git.BadName, git.BadObject) as exc:
            raise GitError(f"object {sha} cannot be read: {exc}") from None

    def _keep_blob(self, sha: str, data: bytes) -> None:
        if len(data) <= _BLOB_CACHE_MAX:
            self._blobs.put(sha, data)

    def read_blob(self, sha: str) -> bytes:
        data = self._blobs.get(sha)
        if data is None:
            data = self._raw(sha)
            if objects.is_sha(sha):
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
        try:
            return objects.parse_batch(data, wanted)
        except KeyError as missing:
            raise GitError(f"blob {missing.args[0]} is missing from the object database"
                           ) from None

    def _tree(self, sha: str, like: str | None = None) -> Tree:
        """The parsed tree ``sha``; ``like`` names a cached tree it probably resembles
        (the same tree before a few edits), which makes parsing it nearly free."""
        cached = self._trees.get(sha, touch=True)
        if cached is not None:
            return cached
        tree = objects.parse_tree(self._raw(sha), self._trees.get(like) if like else None)
        if tree is None:
            raise GitError(f"tree {sha} cannot be parsed")
        self._trees.put(sha, tree)
        return tree

    def read_tree(self, sha: str) -> list[TreeEntry]:
        return self._tree(sha).entries

    def tree_index(self, sha: str) -> dict[str, TreeEntry]:
        """``{name: entry}`` of a tree (cached with the tree)."""
        return self._tree(sha).by_name()

    def read_commit(self, sha: str) -> CommitInfo:
        info = self._commits.get(sha)
        if info is None:
            info = objects.parse_commit(sha, self._raw(sha))
            if objects.is_sha(sha):  # only a full id names one object forever
                self._commits.put(sha, info)
        return info

    def path_entry(self, tree: str, path: str) -> TreeEntry | None:
        """The entry at ``path`` (slash separated) below ``tree``, or None."""
        entry: TreeEntry | None = TreeEntry(TREE_MODE, "", tree)
        for part in (p for p in path.split("/") if p):
            if entry is None or not entry.is_tree:
                return None
            entry = self.tree_index(entry.sha).get(part)
        return entry

    def diff_trees(self, old: str | None, new: str | None) -> list[Pair]:
        """The entries of two trees (None: the empty tree) that differ, one level deep, as
        (old, new) pairs in tree order; an entry only one side has is paired with None (so
        a name that turned from a tree into a file, or back, comes as two pairs)."""
        if old == new:
            return []
        key = (old, new)
        cached = self._diffs.get(key)
        if cached is None:
            before = self.read_tree(old) if old else []
            cached = objects.diff_entries(before, self._tree(new, like=old).entries if new else [])
            if len(cached) > _DIFF_CACHE_PAIRS:
                return cached
            self._diffs.put(key, cached)
        return list(cached)

    # ------------------------------------------------------------ writing objects
    def _store(self, kind: bytes, data: bytes) -> str:
        """Write one object without a process, by gitdb's loose object writer (a temporary
        file renamed into place, as git writes it), then freshened as git freshens an
        object it finds stored (so ``git gc`` never prunes it before a ref names it). git
        writes it (``hash-object -w``) when the repository asks for more (shared
        permissions, fsync, SHA-256, a compression level, a push quarantine)."""
        self.maintenance.wrote()
        if not self._writes_objects():
            return self.out("hash-object", "-t", kind.decode(), "-w", "--stdin", "--literally",
                            input=data).strip()
        sha = str(self._loose.store(IStream(kind, len(data), io.BytesIO(data))).hexsha.decode())
        os.utime(os.path.join(self._objects_dir, sha[:2], sha[2:]))
        return sha

    def _writes_objects(self) -> bool:
        """Whether this process may write objects itself: git's default zlib level for
        loose objects (gitdb's), and no setting or push quarantine that asks git to."""
        return self._settings.level() == 1 and not self._env.git_writes_objects()

    def write_blob(self, data: bytes) -> str:
        sha = self._store(b"blob", data)
        self._keep_blob(sha, data)
        return sha

    def _write_sorted_tree(self, ordered: list[TreeEntry], tree: Tree | None = None) -> str:
        if tree is None:
            tree = Tree(ordered, objects.serialise_tree(ordered))
        sha = self._store(b"tree", tree.raw)
        self._trees.put(sha, tree)
        return sha

    def edit_tree(self, tree: str | None, changes: Mapping[str, str | None],
                  modes: Mapping[str, str] | None = None) -> str:
        """A new tree: ``tree`` with each path set to a blob sha (mode 100644, or the mode
        ``modes`` gives the path, such as a symlink's 120000) or removed (None).
        Intermediate trees are created or dropped as needed."""
        index = self.tree_index(tree) if tree else {}
        edits, nested = objects.split_edits(changes)
        modes = {path.strip("/"): mode for path, mode in (modes or {}).items()}
        for name, entry in edits.items():
            if entry is not None and name in modes:
                edits[name] = TreeEntry(modes[name], name, entry.sha)
        for name, sub in nested.items():
            current = edits[name] if name in edits else index.get(name)
            below = current.sha if current and current.is_tree else None
            subtree = self.edit_tree(below, sub, {
                path[len(name) + 1:]: mode for path, mode in modes.items()
                if path.startswith(name + "/")})
            if subtree == EMPTY_TREE and below is None:
                continue  # only removals of paths that are not there: a file stays
            edits[name] = None if subtree == EMPTY_TREE else TreeEntry(TREE_MODE, name, subtree)
        if tree is None:
            entries = objects.merged_entries((), edits)
            return self._write_sorted_tree(entries) if entries else EMPTY_TREE
        spliced = objects.splice(self._tree(tree), edits)
        if spliced is None:  # not in git's order, or a name twice: rebuild it whole
            entries = objects.merged_entries(self._tree(tree).entries, edits)
            return self._write_sorted_tree(entries) if entries else EMPTY_TREE
        if not spliced.entries:
            return EMPTY_TREE
        sha = self._write_sorted_tree(spliced.entries, spliced)  # and what changed:
        self._diffs.put((tree, sha), objects.edit_pairs(self._tree(tree).by_name(), edits))
        return sha

    def identity(self, kind: str = "AUTHOR") -> str:
        """``Name <email> <time> <tz>`` as git would record it now (or a fallback)."""
        return self._identities.line(kind)

    def write_commit(self, tree: str, parents: Sequence[str], message: str, *,
                     author: str | None = None) -> str:
        """A commit of ``tree`` and ``parents`` (which must exist) as ``git commit-tree``
        writes it (git's identity rules, UTF-8, unsigned); ``author``: given instead."""
        body = message if message.endswith("\n") else message + "\n"
        if tree != EMPTY_TREE:
            self._tree(tree)  # GitError if there is no such tree
        else:  # git knows it without storing it; fsck wants it stored
            self._store(b"tree", b"")
        if not all(self.read_commit(parent).tree for parent in parents):
            raise GitError(f"a parent of the new commit is not a commit: {parents}")
        if objects.message_needs_git(body) and author is None and len(set(parents)) == len(parents):
            # git refuses (NUL) or rewrites (non-characters) such a message: let it decide
            proc = self.run("-c", "i18n.commitEncoding=UTF-8", "commit-tree", "--no-gpg-sign",
                            *(arg for p in parents for arg in ("-p", p)), tree,
                            input=body.encode())
            return proc.stdout.decode().strip()
        now = time.time()
        raw = objects.serialise_commit(tree, parents,
                                       author or self._identities.line("AUTHOR", now),
                                       self._identities.line("COMMITTER", now), body)
        sha = self._store(b"commit", raw)
        self._commits.put(sha, objects.parse_commit(sha, raw))
        return sha

