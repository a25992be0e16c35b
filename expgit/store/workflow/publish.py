"""Moving ``main``: one atomic compare-and-swap, then working trees follow.

Every write to ``main`` (apply, revert) ends here. The ref transaction moves ``main`` from
``old`` to ``new`` together with any bookkeeping refs, or changes nothing. Afterwards each
working tree that has ``main`` checked out is updated exactly as ``git merge --ff-only``
would (``git read-tree -m -u OLD NEW``): uncommitted changes to files the update does not
touch are kept; if one would be overwritten, git changes nothing there and a warning
says how to catch up.
"""

from __future__ import annotations

from collections.abc import Sequence

from expgit.git.repo import RefUpdate
from expgit.git.worktrees import sync_worktrees
from expgit.store.repository import ExperienceRepository


def publish(repo: ExperienceRepository, new: str, old: str | None,
            extra: Sequence[RefUpdate], message: str) -> list[str]:
    """CAS ``main`` from ``old`` to ``new`` with ``extra`` in one transaction."""
    repo.git.update_refs([RefUpdate(repo.main_ref, new, old), *extra], message)
    return sync_worktrees(repo.git, repo.main_ref, old, new)
