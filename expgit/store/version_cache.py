"""The versions of one commit, kept across processes (:mod:`expgit.store.derived`).

A file's version at a commit is a function of that commit's history, and a commit id
names its whole history, so versions stored under a commit id are never stale. The
snapshot loader stores the versions it computed with a ``git log`` pass (the costly
case), one commit per experiences root, and starts from them in the next process:
versions of a newer ``main`` are then derived from them by diffing the few commits in
between, as within one process.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from expgit.store.derived import keyed_cache_file, read_cache, write_cache

FORMAT = "versions-2"  # 2: the first commit too


def _file(common_dir: Path, root: str) -> Path:
    return keyed_cache_file(common_dir, "versions-", root)


Versions = dict[str, tuple[int, str, str]]  # path: (version, last commit, first commit)


def load_versions(common_dir: Path, root: str) -> tuple[str, Versions] | None:
    """``(commit, {path: (version, last commit, first commit)})`` as stored, or None."""
    entries = read_cache(_file(common_dir, root), FORMAT)
    if entries is None or entries.get("root") != root:
        return None
    commit, versions = entries.get("commit"), entries.get("versions")
    if not isinstance(commit, str) or not isinstance(versions, dict):
        return None
    try:
        return commit, {str(p): (int(v), str(c), str(f)) for p, (v, c, f) in versions.items()}
    except (TypeError, ValueError):
        return None


def save_versions(common_dir: Path, root: str, commit: str,
                  versions: Mapping[str, tuple[int, str, str]]) -> None:
    write_cache(_file(common_dir, root), FORMAT,
                {"root": root, "commit": commit, "versions": dict(versions)})
