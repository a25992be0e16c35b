"""An experience repository: a git repository plus its committed ``expgit.toml``."""

from __future__ import annotations

import os
from functools import cached_property

from expgit.errors import InvalidInputError, NotFoundError, UsageError
from expgit.git.repo import GitRepo
from expgit.store.derived.snapshot import Snapshot, SnapshotLoader
from expgit.store.format.layout import Layout
from expgit.store.format.settings import SETTINGS_FILE, Settings, parse_settings
from expgit.store.lock import RepoLock


class ExperienceRepository:
    def __init__(self, git: GitRepo, settings: Settings, *, initialised: bool = True) -> None:
        self.git = git
        self.settings = settings
        self.initialised = initialised  # False: no expgit.toml committed, defaults in use

    @classmethod
    def open(cls, path: str | os.PathLike[str] = ".") -> ExperienceRepository:
        git = GitRepo.discover(path)
        found = _settings_file(git)
        return cls(git, _parse_settings(git, found), initialised=found is not None)

    @property
    def main_ref(self) -> str:
        return self.settings.main_ref

    @property
    def root(self) -> str:
        return self.settings.experiences_root

    @property
    def layout(self) -> Layout:
        return Layout(self.settings.layout, self.root)

    def path_of(self, name: str) -> str:
        return self.layout.path_of(name)

    def name_of(self, path: str) -> str | None:
        """The experience name a repository path stands for, or None if it is not one."""
        return self.layout.name_of(path)

    def main_commit(self) -> str:
        sha = self.git.ref(self.main_ref)
        if sha is None:
            raise InvalidInputError(
                f"branch {self.settings.main_branch!r} does not exist yet",
                hint="create the repository with `expgit init`")
        return sha

    def commit(self, rev: str) -> str:
        sha = self.git.resolve(rev)
        if sha is None:
            raise NotFoundError(f"unknown revision {rev!r}")
        return sha

    def lock(self, purpose: str = "") -> RepoLock:
        return RepoLock(self.git.common_dir, wait_seconds=self.settings.lock_wait_seconds,
                        stale_seconds=self.settings.lock_stale_seconds, purpose=purpose,
                        git=self.git)

    @cached_property
    def snapshots(self) -> SnapshotLoader:
        return SnapshotLoader.shared(self.git, self.root, self.settings.token_budget,
                                     self.settings.layout)

    def snapshot(self, rev: str | None = None) -> Snapshot:
        return self.snapshots.load(self.commit(rev) if rev else self.main_commit())


def _settings_file(git: GitRepo) -> tuple[str, str] | None:
    """``(ref, blob id)`` of ``expgit.toml`` at the tip of HEAD's branch, else of
    ``main``; None if neither has one."""
    for ref in (git.head_symref(), "refs/heads/main"):
        tip = git.ref(ref) if ref else None
        if tip is None:
            continue
        entry = git.path_entry(git.read_commit(tip).tree, SETTINGS_FILE)
        if entry is not None:
            return ref or "", entry.sha
    return None


def _parse_settings(git: GitRepo, found: tuple[str, str] | None) -> Settings:
    if found is None:
        return Settings()
    ref, blob = found
    text = git.read_blob(blob).decode("utf-8", "replace")
    return parse_settings(text, f"{SETTINGS_FILE} at {ref}")


def load_settings(git: GitRepo) -> Settings:
    """Settings from ``expgit.toml`` at the tip of HEAD's branch, else of ``main``."""
    return _parse_settings(git, _settings_file(git))


def require_initialised(repo: ExperienceRepository) -> None:
    """Refuse a git repository that is not an experience repository: one whose branch
    (HEAD's, else ``main``) has no committed ``expgit.toml``. Raises UsageError."""
    if not repo.initialised:
        where = repo.git.work_tree or repo.git.git_dir
        raise UsageError(
            f"{where} is not an expgit repository: no {SETTINGS_FILE} is committed on "
            f"{repo.settings.main_branch}",
            hint="create one with `expgit init`, or `expgit init --from DIR` to seed it")
