"""The environment of the git processes expgit starts for one repository.

git takes its repository from variables first: ``GIT_DIR``, ``GIT_WORK_TREE``, the index
(``GIT_INDEX_FILE``), the object directories (``GIT_OBJECT_DIRECTORY``,
``GIT_ALTERNATE_OBJECT_DIRECTORIES``), ``GIT_COMMON_DIR`` and a few more. expgit names its
repository in every process it starts (``GIT_DIR``, and ``GIT_WORK_TREE`` unless it is
bare), so ``expgit -C B`` works on B even when the shell exported ``GIT_DIR=A``.

The other inherited variables are kept when they describe this same repository: inside a
hook, git sets them for the repository the hook runs in (the index being committed, the
quarantine directory holding the objects of a push under check), and expgit must see what
git sees. Inherited from another repository, they are dropped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

# what names the parts of one repository (git's own list: `git rev-parse --local-env-vars`,
# less the configuration variables, which are not about a repository)
REPO_VARIABLES = (
    "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_QUARANTINE_PATH", "GIT_PREFIX",
    "GIT_IMPLICIT_WORK_TREE", "GIT_SHALLOW_FILE", "GIT_GRAFT_FILE", "GIT_INTERNAL_SUPER_PREFIX",
)
# what a process started in another work tree must find for itself, from its directory
_WORKTREE_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR",
                       "GIT_PREFIX", "GIT_IMPLICIT_WORK_TREE")


def inherited_repository(environ: Mapping[str, str],
                         find: Callable[[str], Path | None]) -> Path | None:
    """The git dir the inherited repository variables describe: ``GIT_DIR`` (relative to
    the current directory), else, when another one is set (a hook of the main work tree
    gets ``GIT_INDEX_FILE`` alone), the repository ``find`` finds from the current
    directory. None when no such variable is set, or ``find`` finds none."""
    value = environ.get("GIT_DIR")
    if value:
        return Path(os.path.abspath(value)).resolve()
    if any(environ.get(name) for name in REPO_VARIABLES):
        return find(os.getcwd())
    return None


# the repository variables that hold paths, relative to the directory git starts in
_PATH_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                   "GIT_COMMON_DIR", "GIT_QUARANTINE_PATH", "GIT_SHALLOW_FILE",
                   "GIT_GRAFT_FILE")


def anchored_paths(environ: Mapping[str, str], cwd: str) -> dict[str, str]:
    """The relative path-valued repository variables of ``environ`` made absolute from
    ``cwd`` (the list of ``GIT_ALTERNATE_OBJECT_DIRECTORIES`` item by item): what to set
    before changing directory so that they keep naming what they named."""
    changed = {name: os.path.join(cwd, value) for name in _PATH_VARIABLES
               if (value := environ.get(name)) and not os.path.isabs(value)}
    alternates = environ.get("GIT_ALTERNATE_OBJECT_DIRECTORIES")
    if alternates:
        anchored = os.pathsep.join(os.path.join(cwd, item) if item else item
                                   for item in alternates.split(os.pathsep))
        if anchored != alternates:
            changed["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = anchored
    return changed


def environ_key() -> object:
    """The current ``os.environ``, as a value that compares equal exactly while nothing in
    it changed (a copy of its raw bytes mapping: microseconds, where decoding every
    variable takes a hundred)."""
    raw = getattr(os.environ, "_data", None)
    return dict(raw) if isinstance(raw, dict) else dict(os.environ)


def without_repository(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without any repository variable: for ``git init`` of a new one."""
    return {k: v for k, v in environ.items() if k != "GIT_DIR" and k not in REPO_VARIABLES}


@dataclass(frozen=True)
class RepoEnv:
    """How git processes of one repository are run. ``foreign``: the inherited
    repository variables describe another repository (they are dropped)."""

    git_dir: Path
    common_dir: Path
    work_tree: Path | None
    foreign: bool

    def process(self, other_worktree: bool = False) -> dict[str, str]:
        """The environment of one git process, from the current ``os.environ``.

        ``other_worktree``: the process runs in another work tree of this repository (its
        current directory says which): git finds its git dir, work tree and index there;
        the shared object directories are kept."""
        env = without_repository(os.environ) if self.foreign else dict(os.environ)
        if other_worktree:
            for name in _WORKTREE_VARIABLES:
                env.pop(name, None)
            return env
        env["GIT_DIR"] = str(self.git_dir)
        if self.work_tree is not None:
            env["GIT_WORK_TREE"] = str(self.work_tree)
        else:
            env.pop("GIT_WORK_TREE", None)
        return env

    def persistent(self) -> dict[str, str]:
        """Variables to add to the environment of a process that can only add to the
        inherited one (GitPython's persistent ``cat-file``): ``GIT_DIR``, and for each
        foreign variable that is set a value that means what its absence means."""
        added = {"GIT_DIR": str(self.git_dir)}
        if not self.foreign:
            return added
        neutral = {
            # cat-file ignores the work tree, but git refuses one that does not exist
            "GIT_WORK_TREE": str(self.work_tree or self.git_dir),
            "GIT_INDEX_FILE": str(self.git_dir / "index"),
            "GIT_OBJECT_DIRECTORY": str(self.common_dir / "objects"),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": "",
            "GIT_COMMON_DIR": str(self.common_dir),
            "GIT_SHALLOW_FILE": str(self.common_dir / "shallow"),
            "GIT_GRAFT_FILE": str(self.common_dir / "info" / "grafts"),
        }
        added.update((name, value) for name, value in neutral.items() if name in os.environ)
        return added

    def git_writes_objects(self) -> bool:
        """Whether git must write the objects: the inherited object directory (a push
        quarantine, during a server hook) is where new objects belong."""
        return not self.foreign and ("GIT_OBJECT_DIRECTORY" in os.environ
                                     or "GIT_QUARANTINE_PATH" in os.environ)
