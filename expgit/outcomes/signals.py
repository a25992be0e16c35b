"""How a session's feedback signals ride on a :class:`~expgit.core.domain.Rollout`.

``Message`` has no metadata of its own, so both live in ``rollout.metadata``:

* ``message_stamps``: ``[{index, at?, response_id?}]`` — ``index`` is the position in
  ``rollout.messages``; ``at`` an ISO-8601 time (a time without zone is UTC);
  ``response_id`` marks an **assistant** message as a response to be evaluated (ids are
  unique in a rollout). Unstamped messages, and stamps without ``at``, have no known
  time (a stamp without ``at`` only marks a response).
* ``feedback_events``: ``[{response_id, kind, rating?, at?, text?}]`` — ``kind`` is
  ``thumb_up``, ``thumb_down`` or ``rating``; a ``rating`` event needs a signed
  ``rating`` (< 0 negative, > 0 positive, 0 neutral); a thumb's ``rating`` is ignored.

Example::

    {"message_stamps": [{"index": 0, "at": "2026-05-01T10:00:00Z"},
                        {"index": 1, "at": "2026-05-01T10:00:05Z", "response_id": "r1"}],
     "feedback_events": [{"response_id": "r1", "kind": "thumb_up",
                          "at": "2026-05-01T10:01:00Z"}]}
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from expgit.core.domain import Rollout
from expgit.errors import InvalidInputError

STAMPS_KEY = "message_stamps"
FEEDBACK_KEY = "feedback_events"

FeedbackKind = Literal["thumb_up", "thumb_down", "rating"]


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


UtcTime = Annotated[datetime, AfterValidator(_utc)]  # a time without zone is UTC


class MessageStamp(BaseModel):
    """The time of ``rollout.messages[index]`` and, for a response, its id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0)
    at: UtcTime | None = None
    response_id: str | None = Field(default=None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _says_something(self) -> MessageStamp:
        if self.at is None and self.response_id is None:
            raise ValueError("a stamp needs a time (at), a response_id, or both")
        return self


class FeedbackEvent(BaseModel):
    """One explicit feedback on a response: a thumb or a signed rating."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    response_id: str = Field(min_length=1, max_length=200)
    kind: FeedbackKind
    rating: float | None = None
    at: UtcTime | None = None
    text: str = Field(default="", max_length=2000)

    @model_validator(mode="before")
    @classmethod
    def _seed_names(cls, data: Any) -> Any:
        """Also the field names of a chat service's ``/feedback`` events:
        ``feedback_type`` (kind), ``feedback_text`` (text), ``timestamp`` (at); and the
        acknowledgement fields they carry (session id, delay, accepted), dropped."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for alias, name in (("feedback_type", "kind"), ("feedback_text", "text"),
                            ("timestamp", "at")):
            if alias in data:
                value = data.pop(alias)
                data.setdefault(name, value)
        for ignored in ("session_id", "feedback_delay_sec", "accepted"):
            data.pop(ignored, None)
        return data

    @model_validator(mode="after")
    def _rating_given(self) -> FeedbackEvent:
        if self.kind == "rating" and self.rating is None:
            raise ValueError("a 'rating' event needs a rating (< 0 negative, > 0 positive)")
        return self

    @property
    def negative(self) -> bool:
        return self.kind == "thumb_down" or (
            self.kind == "rating" and self.rating is not None and self.rating < 0)

    @property
    def positive(self) -> bool:
        return self.kind == "thumb_up" or (
            self.kind == "rating" and self.rating is not None and self.rating > 0)


class SessionSignals(BaseModel):
    """The stamps and feedback events of one rollout, checked against its messages."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    message_stamps: list[MessageStamp] = Field(default_factory=list)
    feedback_events: list[FeedbackEvent] = Field(default_factory=list)

    def stamp_of(self) -> dict[int, MessageStamp]:
        return {s.index: s for s in self.message_stamps}


def session_signals(rollout: Rollout) -> SessionSignals:
    """The signals in ``rollout.metadata``; InvalidInputError naming the bad field."""
    raw: dict[str, Any] = {key: rollout.metadata[key] for key in (STAMPS_KEY, FEEDBACK_KEY)
                           if rollout.metadata.get(key) is not None}
    try:
        signals = SessionSignals.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInputError(f"rollout of case {rollout.case.name!r}: metadata.{where}: "
                                f"{first['msg']}") from None
    seen_index: set[int] = set()
    seen_response: set[str] = set()
    for stamp in signals.message_stamps:
        where = f"rollout of case {rollout.case.name!r}: metadata.{STAMPS_KEY}"
        if stamp.index >= len(rollout.messages) or stamp.index in seen_index:
            raise InvalidInputError(f"{where}: index {stamp.index} is out of range or "
                                    f"stamped twice ({len(rollout.messages)} messages)")
        seen_index.add(stamp.index)
        if stamp.response_id is None:
            continue
        if rollout.messages[stamp.index].role != "assistant":
            raise InvalidInputError(f"{where}: response_id {stamp.response_id!r} is on a "
                                    f"{rollout.messages[stamp.index].role} message; "
                                    "responses are assistant messages")
        if stamp.response_id in seen_response:
            raise InvalidInputError(f"{where}: response_id {stamp.response_id!r} is used twice")
        seen_response.add(stamp.response_id)
    return signals
