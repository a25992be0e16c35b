"""What ``expgit sessions status`` answers, and the ledger that keeps it in the
derived-data cache: the status of one manifests folder (by tree id) with the file names
behind its listed lines, so the status of the next folder is the kept one moved forward
by the manifests that changed (:func:`advance`), not a count of every session again."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
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


LINE_FIELDS = frozenset(SessionLine.model_fields)
# the counts a manifest adds to the status: (its summary's attribute, from its line?)
_COUNTS = (("segments", True), ("labelled", True), ("trained", True),
           ("superseded", False), ("memory_eligible", False), ("sft_eligible", False))


@dataclass(frozen=True)
class Summary:
    """What the status needs of one manifest: a function of its blob, kept by blob id
    in the derived-data cache (:mod:`expgit.store.derived`), so a status of 100,000
    sessions parses only the manifests that changed since the last one."""

    line: dict[str, Any]  # the fields of its SessionLine, checked (made one only if shown)
    superseded: int
    memory_eligible: int
    sft_eligible: int
    invalidations: list[str]
    loads: list[list[str]]  # its named skill loads: [skill, ISO time or ""]
    started: str | None  # the day (YYYY-MM-DD) of its first and last message, if known
    ended: str | None

    def row(self) -> list[object]:
        return [self.line, self.superseded, self.memory_eligible,
                self.sft_eligible, self.invalidations, self.loads, self.started, self.ended]

    def count(self, name: str, from_line: bool) -> int:
        value = self.line[name] if from_line else getattr(self, name)
        return int(value)

    @classmethod
    def from_row(cls, row: object) -> Summary | None:
        """The summary a cache row holds, None if it is not one (checked field by field:
        cheaper than a model validation, 100,000 times)."""
        # plain type tests, no generator: 100,000 rows a status (bool is not an int here)
        if not (type(row) is list and len(row) == 8 and type(row[0]) is dict
                and type(row[1]) is int and type(row[2]) is int and type(row[3]) is int
                and type(row[4]) is list and type(row[5]) is list
                and (row[6] is None or type(row[6]) is str)
                and (row[7] is None or type(row[7]) is str)):
            return None
        line, invalidations, loads = row[0], row[4], row[5]
        if loads and not all(type(load) is list and len(load) == 2 and type(load[0]) is str
                             and type(load[1]) is str for load in loads):
            return None
        if not (line.keys() == LINE_FIELDS
                and type(line["messages"]) is int and type(line["segments"]) is int
                and type(line["labelled"]) is int and type(line["trained"]) is int
                and type(line["session"]) is str and type(line["format"]) is str
                and type(line["status"]) is str
                and (line["agent"] is None or type(line["agent"]) is str)
                and (line["status_reason"] is None or type(line["status_reason"]) is str)
                and (not invalidations or all(type(i) is str for i in invalidations))):
            return None
        return cls(line, row[1], row[2], row[3], row[4], loads, row[6], row[7])


class Usage(BaseModel):
    """The skill loads of every session of a folder, by skill and day (``""``: loads of
    a log without times), with the days the sessions start and end on: what the usage
    counts need (:mod:`expgit.sessions.skill_usage`), in a size that follows the skills
    and the days, not the sessions."""

    loads: dict[str, dict[str, tuple[int, str]]] = Field(default_factory=dict)  # [n, last]
    starts: dict[str, int] = Field(default_factory=dict)  # day -> sessions starting then
    ends: dict[str, int] = Field(default_factory=dict)

    @classmethod
    def of(cls, summaries: list[Summary]) -> Usage:
        """The usage of a whole folder's ``summaries``."""
        usage = cls()
        ok = usage.fold([(None, s) for s in summaries])
        assert ok  # nothing is taken away
        return usage

    def fold(self, changes: list[tuple[Summary | None, Summary | None]]) -> bool:
        """Apply ``changes`` (each a manifest's summary before and after) in place;
        False when the result cannot be told from the kept figures (a load taken away
        was the last of its day, which other loads of that day still hold, or a count
        would go below zero): the caller then counts the folder whole."""
        loads: Counter[tuple[str, str]] = Counter()
        starts: Counter[str] = Counter()
        ends: Counter[str] = Counter()
        for before, after in changes:  # net: a grown session gives back its loads
            for summary, sign in ((before, -1), (after, 1)):
                if summary is None:
                    continue
                for skill, at in summary.loads:
                    loads[(skill, at)] += sign
                if summary.started is not None:
                    starts[summary.started] += sign
                if summary.ended is not None:
                    ends[summary.ended] += sign
        for (skill, at), delta in sorted(loads.items(), key=lambda item: item[1] < 0):
            if delta == 0:
                continue
            days = self.loads.setdefault(skill, {})
            day = at[:10]
            count, last = days.get(day, (0, ""))
            count += delta
            if count < 0 or (delta < 0 and count > 0 and at >= last):
                return False
            if count == 0:
                del days[day]
                if not days:
                    del self.loads[skill]
            else:
                days[day] = (count, max(last, at) if delta > 0 else last)
        for kept, counts in ((self.starts, starts), (self.ends, ends)):
            for day, delta in counts.items():
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
        """The ledger a cache file holds, None if it holds none (or one of another shape)."""
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


Step = tuple[str, Summary | None, Summary | None]
"""One changed manifest: its file name, its summary before and after (None: not there)."""


def advance(kept: Ledger, steps: list[Step], tree: str, *, limit: int) -> Ledger | None:
    """The ledger of the folder ``tree``: ``kept`` with ``steps`` (every manifest that
    differs between the two folders) applied. ``details`` stays the first ``limit``
    names; None when that cannot be told from the kept lines (names removed from a
    truncated listing leave it short) or the counts do not add up."""
    old = kept.status
    totals = {name: getattr(old, name) for name, _ in _COUNTS}
    sessions = old.sessions
    by_status = Counter(old.by_status)
    details = dict(zip(kept.detail_names, old.details, strict=True))
    pending = dict(zip(kept.pending_names, old.pending, strict=True))
    # the kept details are every name up to ``bound`` (all of them when not truncated)
    bound = max(kept.detail_names) if old.details_truncated and kept.detail_names else None
    if old.details_truncated and bound is None:
        return None
    for name, before, after in steps:
        for summary, sign in ((before, -1), (after, 1)):
            if summary is not None:
                sessions += sign
                by_status[summary.line["status"]] += sign
                for count, from_line in _COUNTS:
                    totals[count] += sign * summary.count(count, from_line)
        details.pop(name, None)
        pending.pop(name, None)
        if after is not None:
            line = SessionLine.model_construct(**after.line)
            if line.status == "pending":
                pending[name] = line
            if bound is None or name <= bound:
                details[name] = line
    if sessions < 0 or any(v < 0 for v in [*totals.values(), *by_status.values()]):
        return None
    usage = kept.usage.model_copy(deep=True)
    if not usage.fold([(before, after) for _, before, after in steps]):
        return None
    names = sorted(details)
    if bound is None and len(names) != sessions:
        return None  # the kept listing was not the whole folder after all
    if bound is not None and len(names) < min(limit, sessions):
        return None  # removals left a truncated listing short: only a full count refills
    shown = names[:limit]
    pending_names = sorted(pending)
    status = SessionsStatus.model_construct(
        branch=old.branch, sessions=sessions,
        by_status={k: v for k, v in sorted(by_status.items()) if v},
        **totals, invalidation_proposals=list(old.invalidation_proposals),
        pending=[pending[n] for n in pending_names],
        details=[details[n] for n in shown], details_truncated=len(shown) < sessions)
    return Ledger.model_construct(tree=tree, status=status, detail_names=shown,
                                  pending_names=pending_names, usage=usage)
