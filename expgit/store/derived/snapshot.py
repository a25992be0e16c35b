"""Snapshots: every experience of one commit, with its version and last commit.

* snapshot id = the tree id of the experiences root at that commit;
* ``version`` of a file = how many commits in the commit's history changed it, computed
  in one ``git log --name-only`` pass, or derived exactly from the versions of a cached
  ancestor when only single-parent commits lie in between (a few of them are diffed
  in-process, no process at all);
* across a layout move (``expgit migrate``), a moved file's versions go on from those of
  its old file (:mod:`expgit.store.format.moves`);
* file contents are cached by blob id and front matter is parsed lazily, on first use,
  so a reload after a small change reads only the changed blobs.

Every cache is keyed by an object id (commit, tree or blob), which names immutable
content: a hit is never stale. A reload after a small change reuses the unchanged
:class:`ExperienceEntry` objects of an earlier snapshot (same name, blob, version and
last commit, so the same content), which also keeps their parsed front matter.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

from expgit.errors import GitError
from expgit.git.idcache import IdCache
from expgit.git.objects import GITLINK_MODE, SYMLINK_MODE
from expgit.git.repo import EMPTY_TREE, GitRepo, TreeEntry
from expgit.git.zlist import fields
from expgit.store.derived import version_checkpoint
from expgit.store.derived.version_cache import load_versions, save_versions
from expgit.store.format.experience import Experience, check_experience, decode_experience
from expgit.store.format.layout import SKILL_FILE, LayoutKind
from expgit.store.format.moves import Move, carry_over, moves_among, moves_in


class VersionInfo(NamedTuple):
    """A tuple: the derived index and the checkpoint store it as it is."""

    version: int
    last_commit: str
    first_commit: str  # the commit that made version 1 (``show --version 1``: no walk)


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
    """(commit, changed paths) newest first, for ``git log REVS -- ROOT``.

    NUL-separated (``-z``), so paths come unquoted, as the in-process diff names them."""
    raw = git.run("log", "-z", "--format=%x01%H", "--name-only", "--no-renames", *revs,
                  "--", f"{root}/").stdout
    result: list[tuple[str, list[str]]] = []
    for token in fields(raw):  # "\x01SHA", then "\nPATH", "PATH", ... (none: a merge)
        if token.startswith("\x01"):
            result.append((token[1:], []))
        elif token and result:
            result[-1][1].append(token[1:] if token.startswith("\n") else token)
    return result


def _changed_paths(git: GitRepo, old: str | None, new: str | None, prefix: str) -> list[str]:
    """The file paths (gitlinks and symlinks included) that differ between two trees, as
    ``git diff-tree -r --name-only --no-renames`` lists them."""
    paths: list[str] = []
    for before, after in git.diff_trees(old, new):
        if before is not None and after is not None and before.is_tree and after.is_tree:
            paths += _changed_paths(git, before.sha, after.sha, f"{prefix}{before.name}/")
            continue
        for side, entry in ((0, before), (1, after)):
            if entry is None:
                continue
            if entry.is_tree:  # a folder that appeared or went: every file in it
                gone, came = (entry.sha, None) if side == 0 else (None, entry.sha)
                paths += _changed_paths(git, gone, came, f"{prefix}{entry.name}/")
            elif side == 0 or before is None or before.is_tree:
                paths.append(prefix + entry.name)  # a changed file is listed once
    return paths


_Changes = list[tuple[str, list[str]]]  # (commit, changed paths), newest first
_ANCESTOR_WALK = 256  # single-parent commits walked back looking for cached versions
_CHAIN_DIFF = 8  # up to this many new commits are diffed in-process (more: one `git log`)
_SNAPSHOTS = 8


@dataclass(frozen=True)
class _Listing:
    """The experience files of one root tree: ``{name: (path, blob)}`` and the strays."""

    files: dict[str, tuple[str, str]]
    strays: tuple[str, ...]


@dataclass(frozen=True)
class _Versions:
    """The versions of one commit, and how they were derived: from the cached versions of
    ``base`` (None: from scratch), changing those of ``changed`` paths."""

    versions: dict[str, VersionInfo]
    base: str | None
    changed: frozenset[str]


class SnapshotLoader:
    """Loads snapshots of one repository; one instance per git dir and process."""

    _instances: ClassVar[dict[tuple[str, str], SnapshotLoader]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, git: GitRepo, root: str, token_budget: int,
                 layout: LayoutKind = "flat") -> None:
        self.git = git
        self.root = root
        self.token_budget = token_budget
        self.layout = layout
        self._blobs: IdCache[bytes] = IdCache(256 * 1024 * 1024, len)
        self._versions: OrderedDict[str, dict[str, VersionInfo]] = OrderedDict()
        self._snapshots: IdCache[Snapshot] = IdCache(_SNAPSHOTS)  # by commit
        self._previous: Snapshot | None = None  # the one load() returned last
        self._listings: IdCache[_Listing] = IdCache(_SNAPSHOTS)  # by root tree
        self._lock = threading.RLock()
        self._stored_loaded = False  # the versions another process stored, read once
        self._stored_commit: str | None = None  # ... and the commit they are of

    @classmethod
    def shared(cls, git: GitRepo, root: str, token_budget: int,
               layout: LayoutKind = "flat") -> SnapshotLoader:
        """The process's loader for the experiences under ``root`` of ``git``'s
        repository (a new one when the token budget or the layout changed)."""
        key = (str(git.common_dir), root)
        with cls._guard:
            loader = cls._instances.get(key)
            if loader is None or loader.token_budget != token_budget \
                    or loader.layout != layout:
                loader = cls(git, root, token_budget, layout)
                cls._instances[key] = loader
            return loader

    # -------------------------------------------------------------- versions
    def _root_tree(self, commit: str) -> str | None:
        entry = self.git.path_entry(self.git.read_commit(commit).tree, self.root)
        return entry.sha if entry is not None and entry.is_tree else None

    def _new_chain(self, commit: str) -> list[tuple[str, str]] | None:
        """``[(commit, parent)]``, newest first, when ``commit`` descends from a commit
        whose versions are cached through single-parent commits only."""
        chain: list[tuple[str, str]] = []
        try:
            while len(chain) < _ANCESTOR_WALK:
                parents = self.git.read_commit(commit).parents
                if len(parents) != 1:
                    return None
                chain.append((commit, parents[0]))
                if parents[0] in self._versions:
                    return chain
                commit = parents[0]
        except GitError:
            pass  # a parent that is not there (a shallow clone)
        return None

    def _derive_versions(self, commit: str) -> _Versions:
        """The versions of ``commit``: cached, derived from those of a cached ancestor, or
        computed in one pass over the whole history.

        Deriving is exact only across single-parent commits: ``git log``'s history
        simplification at a merge depends on the whole history below it, so counting
        ``BASE..COMMIT`` on top of the versions of ``BASE`` can differ from one pass when
        a merge is in between. Across merges, the versions are computed in one pass."""
        self._load_stored(commit)
        cached = self._versions.get(commit)
        if cached is not None:
            self._versions.move_to_end(commit)
            return _Versions(cached, commit, frozenset())
        chain = self._new_chain(commit) if self._versions else None
        diffed = chain is not None and len(chain) <= _CHAIN_DIFF
        base, changes, moves = self._diffed(chain) if chain is not None and diffed \
            else self._logged(commit, chain[-1][1] if chain else self._stored_base(commit))
        versions = self._bumped(base, changes, moves)
        # kept for the next process after a `git log` pass, and once when this process
        # started from what another one kept (a long-lived one then goes on in memory)
        self._remember(commit, versions, keep=not diffed or base == self._stored_commit)
        return _Versions(versions, base, frozenset(path for _, paths in changes for path in paths))

    def _load_stored(self, commit: str) -> None:
        """Start from the versions another process kept, else from the checkpoint a fresh
        clone fetched (once per loader)."""
        if self._stored_loaded:
            return
        self._stored_loaded = True
        stored = load_versions(self.git.common_dir, self.root)
        if stored is None:
            found = version_checkpoint.usable(self.git, self.root, commit)
            stored = (found.commit, found.versions) if found is not None else None
        if stored is not None and stored[0] not in self._versions:
            self._versions[stored[0]] = {p: VersionInfo(*v) for p, v in stored[1].items()}
            self._versions.move_to_end(stored[0], last=False)
            self._stored_commit = stored[0]

    def _stored_base(self, commit: str) -> str | None:
        """The commit of the stored versions when ``commit``'s can be derived from them
        with one ``git log`` (further back than the ancestor walk goes), else None."""
        stored = self._stored_commit
        if stored is not None and stored in self._versions \
                and version_checkpoint.linear_since(self.git, stored, commit):
            return stored
        return None

    def _diffed(self, chain: list[tuple[str, str]]) -> tuple[str, _Changes, dict[str, Move]]:
        """What ``git log COMMIT ^BASE --name-only -- ROOT/`` reports for a few
        single-parent commits (each one that changed something under the root, with those
        paths), diffed in-process."""
        prefix = self.root + "/"
        changes = [(sha, _changed_paths(self.git, self._root_tree(parent),
                                        self._root_tree(sha), prefix))
                   for sha, parent in chain]
        return chain[-1][1], changes, moves_among(self.git, (sha for sha, _ in chain))

    def _logged(self, commit: str, base: str | None
                ) -> tuple[str | None, _Changes, dict[str, Move]]:
        revs = [commit] if base is None else [commit, f"^{base}"]
        changes = _log_changes(self.git, revs, self.root)
        return base, changes, moves_in(self.git, revs) if changes else {}

    def _bumped(self, base: str | None, changes: _Changes, moves: dict[str, Move]
                ) -> dict[str, VersionInfo]:
        """The versions of ``base`` with ``changes`` counted on top, oldest first."""
        versions = {} if base is None else dict(self._versions[base])
        for sha, paths in reversed(changes):
            move = moves.get(sha)
            if move is not None and move.to_root == self.root:  # its history goes on
                carry_over(versions, move, paths, self._before_move(sha, move, versions))
            for path in paths:
                old = versions.get(path)
                versions[path] = (VersionInfo(old.version + 1, sha, old.first_commit) if old
                                  else VersionInfo(1, sha, sha))
        return versions

    def _before_move(self, sha: str, move: Move, versions: dict[str, VersionInfo]
                     ) -> dict[str, VersionInfo]:
        """The versions a move at ``sha`` carries over: this root's so far, or the old
        root's at the move's parent."""
        if move.from_root == self.root:
            return dict(versions)
        parent = self.git.read_commit(sha).parents[:1]
        return SnapshotLoader(self.git, move.from_root, self.token_budget) \
            .versions(parent[0]) if parent else {}

    def _remember(self, commit: str, versions: dict[str, VersionInfo], *, keep: bool) -> None:
        self._versions[commit] = versions
        if keep:
            self._stored_commit = None
            save_versions(self.git.common_dir, self.root, commit, versions)
        while len(self._versions) > 8:
            self._versions.popitem(last=False)

    def versions(self, commit: str) -> dict[str, VersionInfo]:
        """Per path under the root: how many commits of ``commit``'s history changed it."""
        with self._lock:
            return self._derive_versions(commit).versions

    def files_at(self, commit: str) -> tuple[str, dict[str, tuple[str, str]]]:
        """The root tree id and ``{name: (path, blob)}`` of the experience files of
        ``commit`` (the empty tree and none without a root), reading no blob."""
        with self._lock:
            root = self._root_tree(commit)
            return (EMPTY_TREE, {}) if root is None else (root, dict(self._listing(root).files))

    def contents_of_tree(self, root_tree: str) -> dict[str, tuple[str, bytes]]:
        """``{name: (path, content)}`` of the experience files of the root tree
        ``root_tree`` (of a commit or of a tree about to be committed), through the blob
        cache."""
        with self._lock:
            files = self._listing(root_tree).files
            contents = self._read([blob for _, blob in files.values()])
            return {name: (path, contents[blob]) for name, (path, blob) in files.items()}

    # ---------------------------------------------------------------- blobs
    def _read(self, blobs: list[str]) -> dict[str, bytes]:
        cached = {b: data for b in blobs if (data := self._blobs.get(b)) is not None}
        fresh = self.git.read_blobs(b for b in blobs if b not in cached)
        for sha, data in fresh.items():
            self._blobs.put(sha, data)
        return cached | fresh

    # ------------------------------------------------------------- snapshots
    def _is_file(self, entry: TreeEntry) -> bool:
        """Whether a root tree entry is an experience file (else: hidden or a stray); a
    symlink or a submodule (gitlink, whose commit is in another repository) is a stray."""
        return not entry.is_tree and entry.name.endswith(".md") \
            and entry.mode not in (SYMLINK_MODE, GITLINK_MODE)

    def _listing(self, tree: str) -> _Listing:
        listing = self._listings.get(tree, touch=True)
        if listing is not None:
            return listing
        files: dict[str, tuple[str, str]] = {}
        strays: list[str] = []
        prefix = self.root + "/"
        for entry in self.git.read_tree(tree):
            name = entry.name
            if name.startswith("."):
                continue
            if self.layout == "skills":  # <name>/SKILL.md; anything else is a stray
                skill = self.git.tree_index(entry.sha).get(SKILL_FILE) \
                    if entry.is_tree else None
                if skill is not None and self._is_file(skill):
                    files[name] = (f"{prefix}{name}/{SKILL_FILE}", skill.sha)
                else:
                    strays.append(prefix + name)
            elif self._is_file(entry):
                files[name[:-3]] = (prefix + name, entry.sha)
            else:
                strays.append(prefix + name)
        listing = _Listing(files, tuple(strays))
        self._listings.put(tree, listing)
        return listing

    def load(self, commit: str) -> Snapshot:
        with self._lock:
            snapshot = self._snapshots.get(commit, touch=True)
            if snapshot is None:
                snapshot = self._load(commit)
                self._snapshots.put(commit, snapshot)
            self._previous = snapshot
            # a fresh container per caller; the entries themselves are shared, unchanged
            return Snapshot(snapshot.commit, snapshot.id, snapshot.root,
                            dict(snapshot.entries), list(snapshot.strays))

    def _entry(self, name: str, path: str, blob: str, data: bytes,
               info: VersionInfo | None) -> ExperienceEntry:
        return ExperienceEntry(name, path, blob, data, info.version if info else 0,
                               info.last_commit if info else None, self.token_budget)

    def _load(self, commit: str) -> Snapshot:
        root = self._root_tree(commit)
        if root is None:
            return Snapshot(commit, EMPTY_TREE, self.root, {}, [])
        derived = self._derive_versions(commit)
        previous = self._previous
        if previous is not None and previous.commit == derived.base:
            updated = self._load_updated(commit, root, previous, derived)
            if updated is not None:
                return updated
        listing = self._listing(root)
        versions = derived.versions
        old_entries = previous.entries if previous is not None else {}
        shared: dict[str, ExperienceEntry] = {}
        for name, (_, blob) in listing.files.items():
            old = old_entries.get(name)
            if old is not None and old.blob == blob:
                info = versions.get(old.path)
                if (old.version == (info.version if info else 0)
                        and old.last_commit == (info.last_commit if info else None)):
                    shared[name] = old  # same content, same version: the same entry
        contents = self._read([blob for name, (_, blob) in listing.files.items()
                               if name not in shared])
        entries: dict[str, ExperienceEntry] = {}
        for name, (path, blob) in listing.files.items():
            entry = shared.get(name)
            entries[name] = entry if entry is not None else self._entry(
                name, path, blob, contents[blob], versions.get(path))
        return Snapshot(commit, root, self.root, entries, list(listing.strays))

    def _load_updated(self, commit: str, root: str, previous: Snapshot,
                      derived: _Versions) -> Snapshot | None:
        """The snapshot of ``commit`` as the previous one with a few files edited in place
        (no file added, removed or turned into a stray), or None if that is not the case.
        Only the edited entries and those whose version changed are built anew."""
        old = self._listings.get(previous.id)
        if previous.id == EMPTY_TREE or old is None \
                or self.layout != "flat":  # skill folders: the listing is built anew
            return None
        prefix = self.root + "/"
        edited: dict[str, str] = {}
        for before, after in self.git.diff_trees(previous.id, root):
            if (before is None or after is None or before.name != after.name
                    or self._is_file(before) != self._is_file(after)):
                return None
            if not before.name.startswith(".") and self._is_file(after):
                edited[after.name[:-3]] = after.sha
        files = dict(old.files)
        for name, blob in edited.items():
            files[name] = (files[name][0], blob)
        self._listings.put(root, _Listing(files, old.strays))
        dirty = set(edited)
        dirty.update(path[len(prefix):-3] for path in derived.changed
                     if path.startswith(prefix) and path.endswith(".md"))
        dirty.intersection_update(files)
        contents = self._read([files[name][1] for name in dirty])
        entries = dict(previous.entries)
        for name in dirty:
            path, blob = files[name]
            entries[name] = self._entry(name, path, blob, contents[blob],
                                        derived.versions.get(path))
        return Snapshot(commit, root, self.root, entries, list(old.strays))
