"""What ``expgit sessions status`` answers, and the ledger the branch's status checkpoint
holds (:mod:`expgit.sessions.status.checkpoint`): the status of one manifests folder (by
tree id) with the file names behind its listed lines and the skill usage."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationError


class SessionLine(BaseModel):
    session: str  # the session key (a hash)
    agent: str | None
    format: str
    messages: int
    status: str
    status_reason: str | None = None
    segments: int
    labelled: int
    trained: int


class SessionsStatus(BaseModel):
    branch: str
    sessions: int = 0
    by_status: dict[str, int] = Field(default_factory=dict)
    segments: int = 0  # active
    superseded: int = 0
    labelled: int = 0
    memory_eligible: int = 0
    sft_eligible: int = 0
    trained: int = 0
    invalidation_proposals: list[str] = Field(default_factory=list)
    pending: list[SessionLine] = Field(default_factory=list)
    details: list[SessionLine] = Field(default_factory=list)
    details_truncated: bool = False  # more sessions than details (see ``all_details``)


class Usage(BaseModel):
    """The skill loads of every session of a folder, by skill and day (``""``: loads of
    a log without times), with the days the sessions start and end on: what the usage
    counts need (:mod:`expgit.sessions.status.skill_usage`), in a size that follows the skills
    and the days, not the sessions."""

    loads: dict[str, dict[str, tuple[int, str]]] = Field(default_factory=dict)  # [n, last]
    starts: dict[str, int] = Field(default_factory=dict)  # day -> sessions starting then
    ends: dict[str, int] = Field(default_factory=dict)

    def fold(self, loads: list[tuple[str, str, int]], starts: list[tuple[str, int]],
             ends: list[tuple[str, int]]) -> bool:
        """Add, in place, the net change of each ``(skill, load time, count)`` and each
        ``(day, count)`` of session starts and ends; False when the result cannot be told
        from the kept figures (a load taken away was the last of its day, which other
        loads of that day still hold, or a count would go below zero): the caller then
        counts from no kept figures."""
        for skill, at, delta in sorted(loads, key=lambda load: load[2] < 0):
            days = self.loads.setdefault(skill, {})
            count, last = days.get(at[:10], (0, ""))
            count += delta
            if count < 0 or (delta < 0 and count > 0 and at >= last):
                return False
            if count:
                days[at[:10]] = (count, max(last, at) if delta > 0 else last)
            else:
                del days[at[:10]]
                if not days:
                    del self.loads[skill]
        for kept, counts in ((self.starts, starts), (self.ends, ends)):
            for day, delta in counts:
                kept[day] = kept.get(day, 0) + delta
                if kept[day] < 0:
                    return False
                if kept[day] == 0:
                    del kept[day]
        return True


class Ledger(BaseModel):
    """The status of the manifests folder ``tree``, with the file name of each line in
    ``details`` and ``pending`` (in the same order), and its skill ``usage``."""

    tree: str
    status: SessionsStatus
    detail_names: list[str]
    pending_names: list[str]
    usage: Usage  # required: a ledger kept before loads were counted is not used

    @classmethod
    def from_cache(cls, entries: dict[str, Any] | None) -> Ledger | None:
        """The ledger ``entries`` hold (a checkpoint's), None if none (or one of another shape)."""
        if entries is None:
            return None
        try:
            ledger = cls.model_validate(entries)
        except ValidationError:
            return None
        status = ledger.status
        if (not ledger.tree or len(ledger.detail_names) != len(status.details)
                or len(ledger.pending_names) != len(status.pending)):
            return None
        return ledger
