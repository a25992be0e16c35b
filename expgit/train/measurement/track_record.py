"""An experience's track record as the gradient estimator shows it: the statistics type,
its one bounded prompt line, and the source the estimator is given.

The statistics are computed above this layer (:func:`expgit.outcomes.stats.experience_stats`
joins the trajectories with the outcome records); the estimator only renders them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Protocol

from expgit.store.repository import ExperienceRepository


class UsageStatsSource(Protocol):
    """Statistics per experience name, read from ``repo``'s git history.

    Makes no LLM call and writes nothing; may be slow on a cold cache (it runs on the git
    executor). Raises ExpgitError when the history cannot be read; the caller then goes
    on without statistics."""

    def __call__(self, repo: ExperienceRepository, /) -> Mapping[str, ExperienceStats]: ...


@dataclass(frozen=True)
class ExperienceStats:
    name: str
    times_used: int = 0
    passed: int = 0
    failed: int = 0
    helpful: int = 0
    harmful: int = 0
    outcomes: int = 0  # outcome records attributed to it (any verdict)
    mean_score: float | None = None  # of the evaluations of the runs that used it
    last_used: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mean_score"] = None if self.mean_score is None else round(self.mean_score, 4)
        data["last_used"] = self.last_used.isoformat() if self.last_used else None
        return data


TRACK_RECORD_CHARS = 240


def track_record(stats: ExperienceStats | None) -> str:
    """One bounded line for a prompt: how the experience has fared so far."""
    if stats is None or (stats.times_used == 0 and stats.outcomes == 0):
        return "no recorded use yet"
    parts = [f"in the agent's context for {stats.times_used} evaluated run"
             f"{'s' if stats.times_used != 1 else ''}: {stats.passed} passed, "
             f"{stats.failed} failed"]
    if stats.mean_score is not None:
        parts.append(f"mean score {stats.mean_score:.2f}")
    if stats.outcomes:
        parts.append(f"outcome reports: {stats.helpful} helpful, {stats.harmful} harmful")
    if stats.last_used is not None:
        parts.append(f"last used {stats.last_used:%Y-%m-%d}")
    return "; ".join(parts)[:TRACK_RECORD_CHARS]
