"""Each skill's reach in listing mode: in how many rollouts the agent loaded it, and the
pass rate when it was loaded and when it was listed but not loaded.

A rollout of listing mode records ``skills_listed`` and ``skills_loaded``
(:class:`~expgit.core.domain.Rollout`); a rollout of retrieval mode has neither and is
not counted. A skill loaded without being listed (left out for the budget, loaded by
name) counts as listed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, computed_field


class ListingRun(Protocol):
    """What reach reads of one rollout (a Rollout's summary)."""

    @property
    def passed(self) -> bool | None: ...

    @property
    def skills_listed(self) -> list[str] | None: ...

    @property
    def skills_loaded(self) -> list[str] | None: ...


class SkillReach(BaseModel):
    """One skill's reach over a phase's listing-mode rollouts."""

    skill: str
    rollouts: int  # listing-mode rollouts that listed (or loaded) it
    loaded: int  # of those, the ones that loaded it
    passed_loaded: int
    passed_not_loaded: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pass_rate_loaded(self) -> float | None:
        return self.passed_loaded / self.loaded if self.loaded else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pass_rate_not_loaded(self) -> float | None:
        rest = self.rollouts - self.loaded
        return self.passed_not_loaded / rest if rest else None

    def line(self) -> str:
        def rate(value: float | None) -> str:
            return "n/a" if value is None else f"{value * 100:.0f}%"
        return (f"{self.skill}: loaded in {self.loaded}/{self.rollouts} rollouts; pass rate "
                f"{rate(self.pass_rate_loaded)} when loaded, "
                f"{rate(self.pass_rate_not_loaded)} when not")


def skill_reach(runs: Sequence[ListingRun]) -> list[SkillReach] | None:
    """The reach of every skill listed or loaded in ``runs``, by name; None when no run
    was in listing mode."""
    listing = [r for r in runs if r.skills_loaded is not None]
    if not listing:
        return None
    names = sorted({n for r in listing for n in (r.skills_listed or []) + (r.skills_loaded or [])})
    reach = []
    for name in names:
        seen = [r for r in listing
                if name in (r.skills_listed or []) or name in (r.skills_loaded or [])]
        loaded = [r for r in seen if name in (r.skills_loaded or [])]
        rest = [r for r in seen if name not in (r.skills_loaded or [])]
        reach.append(SkillReach(skill=name, rollouts=len(seen), loaded=len(loaded),
                                passed_loaded=sum(1 for r in loaded if r.passed),
                                passed_not_loaded=sum(1 for r in rest if r.passed)))
    return reach
