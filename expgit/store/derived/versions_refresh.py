"""Keeping the versions checkpoint (:mod:`expgit.store.derived.version_checkpoint`) of a
repository's ``main`` fresh: called after ``expgit apply`` moved ``main`` and by
``expgit doctor --fix``. Cheap when none is due (a ref, one small blob, a bounded
``git rev-list --count``); never fails the caller."""

from __future__ import annotations

from expgit.store.derived import version_checkpoint
from expgit.store.repository import ExperienceRepository


def refresh_checkpoint(repo: ExperienceRepository, main: str | None = None) -> str | None:
    """A new checkpoint of ``main`` (the branch's tip by default) when one is due: the
    checkpoint branch's new tip, else None."""
    tip = main if main is not None else repo.git.ref(repo.main_ref)
    if tip is None:
        return None
    return version_checkpoint.refresh(repo.git, repo.root, tip, repo.snapshots.versions)
