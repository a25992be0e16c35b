"""The thresholds of the offline learning report (``expgit learn``): the ``[learn]``
section of ``expgit.toml``, each overridable by a flag of the same name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from expgit.errors import UsageError
from expgit.settings import LearnSettings


@dataclass(frozen=True)
class LearnOptions:
    """Thresholds of the rules; the defaults suit a few dozen to a few thousand runs.

    * ``min_uses``: an experience is judged for failure correlation once at least this
      many judged runs had it in context;
    * ``failure_margin``: ... and flagged when its runs' failure rate is at least the
      baseline (all judged runs) plus this margin, and at least ``min_failure_rate``;
    * ``relevance_threshold``: a run is covered by an experience it used whose lexical
      relevance to the run's task (signature and user turn) reaches this share;
    * ``duplicate_threshold``: two experiences are near-duplicates at this lexical
      similarity or above;
    * ``min_outcome_coverage``: below this share of runs with an outcome record, a
      finding says so;
    * ``seed_min_score``: a run is well rated enough to seed an experience from this
      score up (passed, no negative outcome);
    * ``max_evidence``: evidence examples kept per finding (and rollouts per seed).
    """

    min_uses: int = 3
    failure_margin: float = 0.25
    min_failure_rate: float = 0.5
    relevance_threshold: float = 0.5
    duplicate_threshold: float = 0.8
    min_outcome_coverage: float = 0.2
    seed_min_score: float = 0.8
    max_evidence: int = 10

    def __post_init__(self) -> None:
        if self.min_uses < 1 or self.max_evidence < 1:
            raise UsageError("min_uses and max_evidence must be at least 1")
        shares = (self.failure_margin, self.min_failure_rate, self.relevance_threshold,
                  self.duplicate_threshold, self.min_outcome_coverage, self.seed_min_score)
        if any(not 0 <= s <= 1 for s in shares):
            raise UsageError("the learning report's thresholds are shares between 0 and 1")

    @classmethod
    def from_settings(cls, settings: LearnSettings,
                      overrides: Mapping[str, float | int | None] | None = None
                      ) -> LearnOptions:
        """The ``[learn]`` section, with each override that is not None in its place."""
        values: dict[str, Any] = {f.name: getattr(settings, f.name) for f in fields(cls)}
        given = {k: v for k, v in (overrides or {}).items() if v is not None}
        unknown = set(given) - set(values)
        if unknown:
            raise UsageError(f"unknown learn threshold(s): {', '.join(sorted(unknown))}")
        return cls(**(values | given))
