"""How often the ingested sessions loaded each skill on main (``list --usage``, ``status``).

Read from the skill usage the sessions status ledger keeps (loads by skill and day, and
the days the sessions start and end on: :class:`~expgit.sessions.status.ledger.Usage`),
so it costs what changed since the last status, not a read of every session.

* ``loads_30d``: loads on the last :data:`WINDOW_DAYS` calendar days (UTC), today
  included; ``loads``: all of them (a log without times counts only here);
  ``last_load``: the time of the newest;
* ``span_days``: days from the first day a session starts on to the last day one ends
  on. Once it reaches ``[skills] stale_days``, ``stale`` names the active skills that no
  session loaded in the last ``stale_days`` days; before that there is not enough
  history to say (``enough_history`` false);
* ``unknown_loads``: loads of names that are no skill on main.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from pydantic import BaseModel, Field

from expgit.sessions.status.counts import sessions_usage
from expgit.sessions.status.ledger import Usage
from expgit.store.derived.catalog import ExperienceRow
from expgit.store.repository import ExperienceRepository

WINDOW_DAYS = 30


class SkillUsage(BaseModel):
    loads_30d: int = 0
    last_load: datetime | None = None
    loads: int = 0  # every load the ingested sessions show


class SkillsUsage(BaseModel):
    """The ``skills`` block of ``status --json``."""

    window_days: int = WINDOW_DAYS
    stale_days: int
    span_days: int | None = None  # None: no session has times
    enough_history: bool = False
    stale: list[str] = Field(default_factory=list)  # active skills loaded in no session
    unknown_loads: int = 0  # of names no experience on main has
    usage: dict[str, SkillUsage] = Field(default_factory=dict)


def usage_of(usage: Usage, name: str, today: date) -> SkillUsage:
    """The usage of skill ``name`` as of ``today``."""
    days = usage.loads.get(name, {})
    since = (today - timedelta(days=WINDOW_DAYS - 1)).isoformat()
    last = max((at for _, at in days.values() if at), default="")
    return SkillUsage(loads_30d=sum(n for day, (n, _) in days.items() if day and day >= since),
                      last_load=datetime.fromisoformat(last) if last else None,
                      loads=sum(n for n, _ in days.values()))


def skills_usage(repo: ExperienceRepository, rows: list[ExperienceRow],
                 now: datetime | None = None, usage: Usage | None = None) -> SkillsUsage:
    """The usage of every experience of ``rows`` (the catalog of main), the stale active
    ones and the history the sessions span (from ``usage``: else the kept one)."""
    usage = usage if usage is not None else sessions_usage(repo)
    today = (now or datetime.now(UTC)).astimezone(UTC).date()
    stale_days = repo.settings.skills.stale_days
    span = None
    if usage.starts and usage.ends:
        span = (date.fromisoformat(max(usage.ends)) - date.fromisoformat(min(usage.starts))).days
    report = SkillsUsage(stale_days=stale_days, span_days=span,
                         enough_history=span is not None and span >= stale_days,
                         usage={r.name: usage_of(usage, r.name, today) for r in rows})
    names = set(report.usage)
    report.unknown_loads = sum(n for skill, days in usage.loads.items() if skill not in names
                               for n, _ in days.values())
    if report.enough_history:
        since = (today - timedelta(days=stale_days - 1)).isoformat()
        report.stale = [r.name for r in rows if r.status == "active" and not any(
            day and day >= since for day in usage.loads.get(r.name, {}))]
    return report
