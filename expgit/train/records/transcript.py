"""The transcript kept beside a trajectory: the rollout's messages and tool calls with
their results, as the analyze and reflect prompts show them.

Bounded as the prompts are: each tool input and output cut to ``[train]
tool_output_chars`` and each text to ``[limits] max_message_chars`` (head and tail kept
around a ``[... N chars truncated]`` marker), and the whole document to
:data:`MAX_CHARS` (every part halved again, down to 200 characters, until it fits).
Redacted by the run's redactor (:class:`expgit.core.redaction.messages.Redactor`, the one text
redactor of :mod:`expgit.core.redaction.text`), after the rollout itself was. Serialised
canonically (sorted keys), so the same rollout gives the same blob.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from expgit.core.domain import Rollout
from expgit.core.redaction.messages import Redactor
from expgit.errors import InvalidInputError

MAX_CHARS = 200_000


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TranscriptPart(_Model):
    """A text, or a tool call (``name``, ``id``, ``status``, ``input`` as JSON text) and
    its result (``output``)."""

    type: Literal["text", "tool"]
    text: str | None = None
    name: str | None = None
    id: str | None = None
    status: str | None = None
    input: str | None = None
    output: str | None = None


class TranscriptMessage(_Model):
    role: str
    parts: list[TranscriptPart] = Field(default_factory=list)


class Transcript(_Model):
    format: Literal[1] = 1  # of this document: a reader of another refuses it
    trajectory: str  # the content id of the rollout (and of its trajectory)
    case: str
    task_signature: str
    error: str | None = None
    tool_calls: int = 0
    messages: list[TranscriptMessage] = Field(default_factory=list)

    def encode(self) -> bytes:
        return (json.dumps(self.model_dump(mode="json"), ensure_ascii=False, sort_keys=True,
                           indent=1) + "\n").encode("utf-8")


View = Callable[[int, int | None], list[dict[str, Any]]]
"""(tool part limit, text limit) -> the messages as the prompts show them
(:func:`expgit.train.components.trajectory_analyzer.transcript_view`)."""


def build_transcript(rollout: Rollout, tid: str, view: View, redactor: Redactor, *,
                     tool_limit: int, text_limit: int | None = None) -> Transcript:
    """The transcript of ``rollout`` (trajectory ``tid``), bounded and redacted."""
    limit, texts = tool_limit, text_limit
    while True:
        shown = view(limit, texts)
        transcript = Transcript(
            trajectory=tid, case=rollout.case.name, task_signature=rollout.case.task_signature,
            error=rollout.error, messages=[TranscriptMessage.model_validate(m) for m in shown],
            tool_calls=sum(p["type"] == "tool" for m in shown for p in m["parts"]))
        if limit <= 200 or len(transcript.encode()) <= MAX_CHARS:
            return redactor.model(transcript)
        limit = texts = max(200, limit // 2)


def read_transcript(data: bytes, where: str) -> Transcript:
    """A stored transcript; InvalidInputError naming ``where`` if it is not one."""
    try:
        return Transcript.model_validate_json(data)
    except ValidationError as exc:
        raise InvalidInputError(f"{where} is not a readable transcript: "
                                f"{exc.errors()[0]['msg']}") from None
