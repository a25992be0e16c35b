"""RemotePublisher: what one trainer made, pushed to a shared remote (``--remote NAME``).

Several trainers (CI jobs, ``expgit serve`` instances) on different machines share one
bare repository. After each update the training engine hands the publisher the batch's
gradient ids and its proposal id; the publisher pushes the trajectories branch and those
refs, each in the state it is in now (open gradients and proposals as branches, applied
or rejected ones under ``refs/expgit/``), through :mod:`expgit.store.workflow.remote_sync`: never
a forced push. :meth:`RemotePublisher.finish` (end of a run, shutdown of a service)
pushes every side branch (trajectories, outcomes, sessions), the versions checkpoint (a
fast-forward, or left as it is when the remote's went another way: it is a cache) and
whatever an earlier push left behind.

A failed push never fails the training: everything stays in the local refs, the failure
is recorded in the report's ``errors``, and the next push (the next update, ``finish``,
or the next run) sends it again. ``errors`` holds the failures of the latest round only,
so after ``finish`` it says what is not on the remote.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from pydantic import BaseModel, Field

from expgit.errors import ExpgitError
from expgit.store.refnames import GRADIENT_STATES, PROPOSAL_STATES
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.remote_sync import (
    check_remote,
    existing_refs,
    push_checkpoint,
    push_refs,
    push_side_branch,
)

KINDS = ("gradients", "proposals", "trajectories", "outcomes", "sessions")


class RemoteReport(BaseModel):
    """What a run pushed to ``remote``: ``pushed`` counts the gradient and proposal refs
    the remote did not hold yet, and for each side branch the pushes that moved it;
    ``replayed`` the side-branch pushes replayed on a tip another trainer had pushed;
    ``kept_remote`` the records both had written differently (the remote's was kept)."""

    remote: str
    pushed: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    replayed: int = 0
    kept_remote: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)


class RemotePublisher:
    """Pushes one trainer's gradients, proposals and side branches to ``remote``; an
    unknown remote is refused here (UsageError), before any work."""

    def __init__(self, repo: ExperienceRepository, remote: str) -> None:
        check_remote(repo, remote)
        self.repo = repo
        self.remote = remote
        self.report = RemoteReport(remote=remote)
        self._gradients: dict[str, None] = {}  # ids not on the remote yet, in order
        self._proposals: dict[str, None] = {}
        self._lock = threading.Lock()  # one round of pushes at a time

    def side_branches(self) -> list[tuple[str, str, bool]]:
        """(kind, branch, first_wins) of every side branch."""
        settings = self.repo.settings
        return [("trajectories", settings.train.trajectories_branch, True),
                ("outcomes", settings.outcomes.branch, True),
                ("sessions", settings.sessions.branch, False)]

    def track(self, gradient_ids: Iterable[str | None]) -> None:
        """Gradients made by this trainer, to push with the next round."""
        with self._lock:
            self._gradients.update(dict.fromkeys(g for g in gradient_ids if g))

    def after_update(self, gradient_ids: Iterable[str | None], proposal_id: str | None
                     ) -> None:
        """Push the trajectories branch and the refs of one update (and what earlier
        rounds left behind)."""
        self.track(gradient_ids)
        with self._lock:
            if proposal_id:
                self._proposals[proposal_id] = None
            self._round(["trajectories"])

    def finish(self) -> RemoteReport:
        """Push every side branch and every ref not pushed yet; the run's report."""
        with self._lock:
            self._round([kind for kind, _, _ in self.side_branches()])
            try:
                push_checkpoint(self.repo, self.remote)
            except ExpgitError as exc:
                self.report.errors.append(f"expgit/versions: {exc.message}")
            return self.report.model_copy(deep=True)

    def _round(self, kinds: list[str]) -> None:
        self.report.errors = []
        for kind, branch, first_wins in self.side_branches():
            if kind not in kinds:
                continue
            try:
                done = push_side_branch(self.repo, branch, self.remote,
                                        first_wins=first_wins)
            except ExpgitError as exc:
                self.report.errors.append(f"{branch}: {exc.message}")
                continue
            if done.status in ("pushed", "replayed"):
                self.report.pushed[kind] += 1
            self.report.replayed += done.status == "replayed"
            self.report.kept_remote = sorted({*self.report.kept_remote,
                                              *(f"{branch}:{p}" for p in done.kept_remote)})
        self._push_refs()

    def _push_refs(self) -> None:
        refs = {**existing_refs(self.repo, self._gradients, GRADIENT_STATES),
                **existing_refs(self.repo, self._proposals, PROPOSAL_STATES)}
        try:
            moved = push_refs(self.repo, refs, self.remote)
        except ExpgitError as exc:
            self.report.errors.append(f"gradients and proposals: {exc.message}")
            return
        gradient_prefixes = tuple(GRADIENT_STATES.values())
        for ref in moved:
            kind = "gradients" if ref.startswith(gradient_prefixes) else "proposals"
            self.report.pushed[kind] += 1
        self._gradients.clear()
        self._proposals.clear()


__all__ = ["KINDS", "RemotePublisher", "RemoteReport"]
