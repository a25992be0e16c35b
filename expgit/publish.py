"""Moving ``main``: one atomic compare-and-swap, then working trees follow.

Every write to ``main`` (apply, revert) ends here. The ref transaction moves ``main`` from
``old`` to ``new`` together with any bookkeeping refs, or changes nothing. Afterwards each
working tree that has ``main`` checked out and is clean is updated exactly as
``git merge --ff-only`` would (``git read-tree -m -u OLD NEW``); a dirty one is left alone
and a warning says how to catch up.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from expgit.gitrepo import GitRepo, RefUpdate
from expgit.repository import ExperienceRepository


def _worktrees_on(git: GitRepo, ref: str) -> list[Path]:
    text = git.out("worktree", "list", "--porcelain")
    found = []
    for block in text.split("\n\n"):
        fields = dict(line.partition(" ")[::2] for line in block.splitlines() if line)
        if fields.get("branch") == ref and "bare" not in fields and "worktree" in fields:
            found.append(Path(fields["worktree"]))
    return found


def sync_worktrees(git: GitRepo, ref: str, old: str | None, new: str) -> list[str]:
    """Bring clean working trees that have ``ref`` checked out from ``old`` to ``new``."""
    warnings = []
    for path in _worktrees_on(git, ref):
        git.run("update-index", "-q", "--refresh", cwd=path, check=False)
        dirty = old is None or git.run("diff-index", "--quiet", old, "--", cwd=path,
                                       check=False).returncode != 0
        proc = None if dirty else git.run("read-tree", "-m", "-u", old or "", new, cwd=path,
                                          check=False)
        if dirty or (proc is not None and proc.returncode != 0):
            why = "has uncommitted changes" if dirty else "could not be updated (" + (
                proc.stderr.decode(errors="replace").strip() if proc else "") + ")"
            warnings.append(
                f"{ref.removeprefix('refs/heads/')} moved to {new[:12]}, but the working "
                f"tree {path} {why}; it was left as it was. Catch up with: git stash && "
                "git reset --hard && git stash pop")
    return warnings


def publish(repo: ExperienceRepository, new: str, old: str | None,
            extra: Sequence[RefUpdate], message: str) -> list[str]:
    """CAS ``main`` from ``old`` to ``new`` with ``extra`` in one transaction."""
    repo.git.update_refs([RefUpdate(repo.main_ref, new, old), *extra], message)
    return sync_worktrees(repo.git, repo.main_ref, old, new)
