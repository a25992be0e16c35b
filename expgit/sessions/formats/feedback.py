"""Feedback events in session files: what users said about the agent's responses, read
next to the messages, kept with the session and used as its segments' labels. What a
feedback row is, how it names its response, and how its segments are labelled and
trained are in docs/sessions.md (the feedback item).

Not said there: a feedback row's fields are those of
:class:`~expgit.outcomes.signals.FeedbackEvent`; a row with no ``response_id`` is on the
last assistant message before it, whose id is then ``message-<index>``. Only in a file
with feedback rows are the message rows' ``response_id`` and ``timestamp`` (of a
message's first row) read, as the session's :class:`~expgit.outcomes.signals.SessionSignals`.
A segment's signals are the session's stamps in its range (re-indexed) and the events on
its responses (:func:`segment_signals`); a segment with no event has none, and is
labelled by the trajectory scorer. Explicit feedback is the most trustworthy label a
session has, and a thumbs down is what there is most to learn from: hence trained
whatever its label.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from expgit.core.domain import Message
from expgit.core.redaction.text import redact_text
from expgit.errors import InvalidInputError
from expgit.outcomes.feedback import ResponseOutcome, evaluate_responses
from expgit.outcomes.signals import FeedbackEvent, MessageStamp, SessionSignals
from expgit.sessions.fingerprint import hash_id

Row = dict[str, Any]
_TIME = TypeAdapter(datetime)
_SEED_EVENT_KEYS = ("feedback_type",)


class FeedbackLabel(BaseModel):
    """A segment labelled by its feedback: the outcome of each of its responses (each
    with the evidence that says why), passed when all passed, score their mean."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    score: float = Field(ge=0, le=1)
    outcomes: list[ResponseOutcome] = Field(min_length=1)


def is_feedback_row(row: Row) -> bool:
    """Whether a session row is a feedback event rather than a message."""
    if row.get("_type") == "feedback" or row.get("type") == "feedback":
        return True
    return (any(key in row for key in _SEED_EVENT_KEYS)
            and "role" not in row and "message" not in row)


def row_time(value: object) -> datetime | None:
    """An ISO-8601 time a row carries (a ``timestamp``), None if it is not one."""
    try:
        return _TIME.validate_python(value) if isinstance(value, str) and value else None
    except ValidationError:
        return None


def _owner(lines: Sequence[int], line: int) -> int | None:
    """The index of the message a row at ``line`` belongs to (the last one starting at
    or before it; ``lines`` ascend), None before the first message."""
    index = bisect_right(lines, line) - 1
    return index if index >= 0 else None


def session_signals_of(messages: Sequence[Message], lines: Sequence[int],
                       message_rows: Iterable[tuple[int, Row]],
                       feedback_rows: Sequence[tuple[int, Row]]) -> SessionSignals | None:
    """The signals of a parsed session (None without feedback rows); ``lines[i]`` is the
    source line at which ``messages[i]`` starts. InvalidInputError names the line of a
    malformed feedback row."""
    if not feedback_rows:
        return None
    times: dict[int, datetime] = {}
    ids: dict[int, str] = {}
    for line, row in message_rows:
        index = _owner(lines, line)
        if index is None:
            continue
        if lines[index] == line and (at := row_time(row.get("timestamp"))) is not None:
            times.setdefault(index, at)
        rid = row.get("response_id")
        if (isinstance(rid, str) and rid and messages[index].role == "assistant"
                and index not in ids):
            if rid in ids.values():
                raise InvalidInputError(f"line {line}: response_id {rid!r} is on two "
                                        "assistant messages; a response id names one")
            ids[index] = rid
    by_id = {rid: index for index, rid in ids.items()}
    explicit = set(by_id)  # a chat service's ids: stored hashed
    events: list[FeedbackEvent] = []
    for line, row in feedback_rows:
        data = {k: v for k, v in row.items() if k not in ("_type", "type")}
        rid = data.get("response_id")
        if rid is None:
            before = _owner(lines, line)
            index = next((i for i in range(before, -1, -1)
                          if messages[i].role == "assistant"), None) \
                if before is not None else None
            if index is None:
                raise InvalidInputError(
                    f"line {line}: feedback names no response_id and no assistant message "
                    "comes before it", hint="put it after the response it is about, or "
                    "give it the response_id of an assistant row")
            rid = ids.setdefault(index, f"message-{index}")
            by_id.setdefault(rid, index)
            data["response_id"] = rid
        elif rid not in by_id:
            raise InvalidInputError(
                f"line {line}: feedback on response {rid!r}, which no assistant row of the "
                "file carries", hint="add \"response_id\" to the assistant row of that "
                "response, or leave it out of the feedback to mean the response before it")
        try:
            events.append(FeedbackEvent.model_validate(data))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "row"
            raise InvalidInputError(f"line {line}: feedback event: {where}: {first['msg']}",
                                    hint="a feedback row has kind (thumb_up, thumb_down, "
                                    "rating) or feedback_type, and rating for a rating"
                                    ) from None
    hashed = {rid: hash_id(f"response:{rid}") if rid in explicit else rid for rid in by_id}
    stamps = [MessageStamp(index=i, at=times.get(i),
                           response_id=hashed[ids[i]] if i in ids else None)
              for i in sorted(set(times) | set(ids))]
    return SessionSignals(message_stamps=stamps, feedback_events=[
        e.model_copy(update={"response_id": hashed[e.response_id]}) for e in events])


def redact_signals(signals: SessionSignals | None, names: Iterable[str]
                   ) -> tuple[SessionSignals | None, Counter[str]]:
    """``signals`` with every feedback text redacted, and the counts."""
    counts: Counter[str] = Counter()
    if signals is None:
        return None, counts
    names = list(names)
    events = []
    for event in signals.feedback_events:
        text, found = redact_text(event.text, names)
        counts.update(found)
        events.append(event.model_copy(update={"text": text}))
    return signals.model_copy(update={"feedback_events": events}), counts


def segment_signals(signals: SessionSignals | None, start: int, end: int
                    ) -> SessionSignals | None:
    """The signals of messages ``start`` .. ``end - 1`` (re-indexed from 0): None when no
    feedback event is on a response among them."""
    if signals is None:
        return None
    stamps = [s.model_copy(update={"index": s.index - start})
              for s in signals.message_stamps if start <= s.index < end]
    responses = {s.response_id for s in stamps if s.response_id}
    events = [e for e in signals.feedback_events if e.response_id in responses]
    if not events:
        return None
    return SessionSignals(message_stamps=stamps, feedback_events=events)


def label_segment(messages: Sequence[Message], signals: SessionSignals, *,
                  reask_window_seconds: float, now: datetime | None = None) -> FeedbackLabel:
    """The feedback label of a segment (the rules of :mod:`expgit.outcomes.feedback`)."""
    outcomes = evaluate_responses(list(messages), signals,
                                  reask_window_seconds=reask_window_seconds,
                                  now=now or datetime.now(UTC))
    return FeedbackLabel(passed=all(o.passed for o in outcomes),
                         score=sum(o.score for o in outcomes) / len(outcomes),
                         outcomes=outcomes)
