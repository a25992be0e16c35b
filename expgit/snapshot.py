"""Snapshots: every experience of one commit, with its version and last commit.

* snapshot id = the tree id of the experiences root at that commit;
* ``version`` of a file = how many commits in the commit's history changed it, computed
  in one ``git log --name-only`` pass (and incrementally from a cached ancestor);
* file contents are cached by blob id and front matter is parsed lazily, on first use,
  so a reload after a small change reads only the changed blobs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from expgit.experience import Experience, check_experience, decode_experience
from expgit.gitrepo import EMPTY_TREE, GitRepo

if TYPE_CHECKING:
    from expgit.repository import ExperienceRepository


@dataclass(frozen=True)
class VersionInfo:
    version: int
    last_commit: str


@dataclass
class ExperienceEntry:
    name: str
    path: str
    blob: str
    data: bytes
    version: int
    last_commit: str | None
    token_budget: int
    _parsed: Experience | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        return decode_experience(self.data, self.path)

    @property
    def experience(self) -> Experience:
        """The parsed file; raises InvalidInputError if it breaks the schema."""
        if self._parsed is None:
            self._parsed = check_experience(self.text, self.path, self.name, self.token_budget)
        return self._parsed


@dataclass
class Snapshot:
    commit: str
    id: str  # tree id of the experiences root (the empty tree if there is none)
    root: str
    entries: dict[str, ExperienceEntry]
    strays: list[str]  # paths under the root that are not <name>.md experience files

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def get(self, name: str) -> ExperienceEntry | None:
        return self.entries.get(name)

    def names(self) -> list[str]:
        return sorted(self.entries)


def _log_changes(git: GitRepo, revs: list[str], root: str) -> list[tuple[str, list[str]]]:
    """(commit, changed paths) newest first, for ``git log REVS -- ROOT``."""
    text = git.out("log", "--format=%x01%H", "--name-only", "--no-renames", *revs, "--",
                   f"{root}/")
    result: list[tuple[str, list[str]]] = []
    for chunk in text.split("\x01")[1:]:
        lines = chunk.split("\n")
        result.append((lines[0], [line for line in lines[1:] if line]))
    return result


class SnapshotLoader:
    """Loads snapshots of one repository; one instance per git dir and process."""

    _instances: ClassVar[dict[tuple[str, str], SnapshotLoader]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, git: GitRepo, root: str, token_budget: int) -> None:
        self.git = git
        self.root = root
        self.token_budget = token_budget
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._blob_bytes = 0
        self._versions: OrderedDict[str, dict[str, VersionInfo]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def for_repo(cls, repo: ExperienceRepository) -> SnapshotLoader:
        key = (str(repo.git.common_dir), repo.root)
        with cls._guard:
            loader = cls._instances.get(key)
            if loader is None or loader.token_budget != repo.settings.token_budget:
                loader = cls(repo.git, repo.root, repo.settings.token_budget)
                cls._instances[key] = loader
            return loader

    # -------------------------------------------------------------- versions
    def versions(self, commit: str) -> dict[str, VersionInfo]:
        """Per path under the root: how many commits of ``commit``'s history changed it."""
        cached = self._versions.get(commit)
        if cached is not None:
            self._versions.move_to_end(commit)
            return cached
        base_commit = next((c for c in reversed(self._versions)
                            if self.git.is_ancestor(c, commit)), None)
        if base_commit is None:
            versions: dict[str, VersionInfo] = {}
            changes = _log_changes(self.git, [commit], self.root)
        else:
            versions = dict(self._versions[base_commit])
            changes = _log_changes(self.git, [commit, f"^{base_commit}"], self.root)
        for sha, paths in reversed(changes):  # oldest first
            for path in paths:
                old = versions.get(path)
                versions[path] = VersionInfo((old.version if old else 0) + 1, sha)
        self._versions[commit] = versions
        while len(self._versions) > 8:
            self._versions.popitem(last=False)
        return versions

    # ---------------------------------------------------------------- blobs
    def _read(self, blobs: list[str]) -> dict[str, bytes]:
        missing = [b for b in blobs if b not in self._blobs]
        fresh = self.git.read_blobs(missing) if missing else {}
        for sha, data in fresh.items():
            self._blobs[sha] = data
            self._blob_bytes += len(data)
        while self._blob_bytes > 256 * 1024 * 1024 and self._blobs:
            _, dropped = self._blobs.popitem(last=False)
            self._blob_bytes -= len(dropped)
        return {b: fresh[b] if b in fresh else self._blobs[b] for b in blobs}

    # ------------------------------------------------------------- snapshots
    def load(self, commit: str) -> Snapshot:
        with self._lock:
            tree = self.git.read_commit(commit).tree
            root_entry = self.git.path_entry(tree, self.root)
            if root_entry is None or not root_entry.is_tree:
                return Snapshot(commit, EMPTY_TREE, self.root, {}, [])
            files: dict[str, tuple[str, str]] = {}
            strays: list[str] = []
            for entry in self.git.read_tree(root_entry.sha):
                path = f"{self.root}/{entry.name}"
                if entry.name.startswith("."):
                    continue
                if entry.is_tree or not entry.name.endswith(".md") or entry.mode == "120000":
                    strays.append(path)
                    continue
                files[entry.name[:-3]] = (path, entry.sha)
            contents = self._read([blob for _, blob in files.values()])
            versions = self.versions(commit)
            entries = {}
            for name, (path, blob) in files.items():
                info = versions.get(path)
                entries[name] = ExperienceEntry(
                    name, path, blob, contents[blob], info.version if info else 0,
                    info.last_commit if info else None, self.token_budget)
            return Snapshot(commit, root_entry.sha, self.root, entries, strays)
