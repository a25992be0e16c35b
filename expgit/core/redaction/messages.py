"""Redaction and bounds of messages, rollouts and cases (the text redactor is
:mod:`expgit.core.redaction.text`): applied where text enters training and the session hub,
before any prompt is built or any object written."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TypeVar

from pydantic import BaseModel

from expgit.core.domain import Message, Part, TextPart, ToolPart
from expgit.core.redaction.text import cap_text, redact_text, redact_value, user_names

M = TypeVar("M", bound=BaseModel)


def _cap(text: str, limit: int | None, counts: Counter[str]) -> str:
    if limit is None:
        return text
    text, removed = cap_text(text, limit)
    if removed:
        counts["cut_messages"] += 1
    return text


def _redacted(text: str, counts: Counter[str], names: Iterable[str], limit: int | None
              ) -> str:
    """``text`` cut to ``limit`` and redacted, its findings counted."""
    redacted, found = redact_text(_cap(text, limit, counts), names)
    counts.update(found)
    return redacted


def _redact_part(part: Part, counts: Counter[str], names: Iterable[str],
                 limit: int | None) -> Part:
    if isinstance(part, TextPart):
        text = _redacted(part.text, counts, names, limit)
        return part if text == part.text else part.model_copy(update={"text": text})
    tool_input = redact_value(part.tool_input, counts, None, names)
    output = None if part.tool_output is None else str(
        redact_value(_cap(part.tool_output, limit, counts), counts, None, names))
    return ToolPart(tool_id=part.tool_id, tool_name=part.tool_name,
                    tool_input=tool_input if isinstance(tool_input, dict) else {},
                    tool_output=output, tool_status=part.tool_status)


def document_names(messages: Sequence[Message]) -> set[str]:
    """The user names of the home folders any of the messages mention."""
    return user_names(json.dumps([m.model_dump(mode="json") for m in messages]))


def redact_messages(messages: Sequence[Message], max_chars: int | None = None
                    ) -> tuple[list[Message], Counter[str]]:
    """The messages with every text, tool input value (recursively, secret-like keys'
    values whole) and tool output redacted, and the counts. ``max_chars``: each text and
    tool output is first cut to that many characters (head and tail kept), counted as
    ``cut_messages``. Home folders of any message are ``~`` and their user names are
    redacted in every message."""
    counts: Counter[str] = Counter()
    names = document_names(messages)
    out = [Message(role=m.role, parts=[_redact_part(p, counts, names, max_chars)
                                       for p in m.parts],
                   reasoning=None if m.reasoning is None
                   else _redacted(m.reasoning, counts, names, max_chars))
           for m in messages]
    return out, counts


def _cap_value(value: object, limit: int, counts: Counter[str]) -> object:
    if isinstance(value, str):
        return _cap(value, limit, counts)
    if isinstance(value, dict):
        return {k: _cap_value(v, limit, counts) for k, v in value.items()}
    if isinstance(value, list):
        return [_cap_value(v, limit, counts) for v in value]
    return value


def redact_model(model: M, counts: Counter[str], max_chars: int | None = None) -> M:
    """A copy of ``model`` (a Case, a Rollout...) with every string in it redacted (and
    cut to ``max_chars``), the findings added to ``counts``; the same object when
    nothing changed."""
    data: object = model.model_dump(mode="json")
    if max_chars is not None:
        data = _cap_value(data, max_chars, counts)
    found: Counter[str] = Counter()
    new = redact_value(data, found, None, user_names(json.dumps(data)))
    counts.update(found)
    if new == model.model_dump(mode="json"):
        return model
    return type(model).model_validate(new)


class Redactor:
    """One run's redaction: what it redacted, by kind, over every text it saw. Training
    redacts each case before it runs and each rollout before anything reads it (prompts,
    trajectories, gradients); model output is redacted or refused (:func:`refusal`)."""

    def __init__(self, max_chars: int | None = None) -> None:
        self.max_chars = max_chars
        self.counts: Counter[str] = Counter()

    def model(self, model: M) -> M:
        return redact_model(model, self.counts, self.max_chars)

    def models(self, models: Sequence[M]) -> list[M]:
        return [self.model(m) for m in models]

    def text(self, text: str) -> str:
        new, found = redact_text(text)
        self.counts.update(found)
        return new

    def report(self) -> dict[str, int]:
        return {k: v for k, v in sorted(self.counts.items()) if v}
