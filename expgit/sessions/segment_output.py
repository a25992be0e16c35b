"""The reply of the ``segment`` stage: the window's messages split into contiguous tasks.

Bounded like the training stages' outputs (:mod:`expgit.train.components.llm_fields`):
a topic is clipped, the number of tasks is capped in the schema. Whether the tasks cover
the window exactly (1..L, contiguous, in order) is checked by :func:`cover_problem`, not
by the schema: a reply that breaks it gets one re-prompt stating the problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from expgit.train.components.llm_fields import strip_titles

TOPIC_CHARS = 120
MAX_TASKS = 48
MAX_NUMBER = 100_000


def _clip_topic(value: Any) -> Any:
    if isinstance(value, str):
        value = " ".join(value.split())
        if len(value) > TOPIC_CHARS:
            return value[:TOPIC_CHARS - 1].rstrip() + "…"
    return value


Topic = Annotated[str, BeforeValidator(_clip_topic), Field(max_length=TOPIC_CHARS)]
MessageNumber = Annotated[int, Field(ge=1, le=MAX_NUMBER)]


class SegmentTask(BaseModel):
    """One task: messages ``start``..``end`` of the window (1-based, inclusive)."""

    model_config = ConfigDict(json_schema_extra=strip_titles)

    start: MessageNumber
    end: MessageNumber
    topic: Topic


class SegmentOutput(BaseModel):
    """The segmenter's reply: the tasks of one window, in order."""

    model_config = ConfigDict(json_schema_extra=strip_titles)

    tasks: list[SegmentTask] = Field(min_length=1, max_length=MAX_TASKS)


def cover_problem(tasks: Sequence[SegmentTask], length: int, *, final: bool) -> str | None:
    """What is wrong with ``tasks`` as a split of a window of ``length`` messages, or None.

    Valid: contiguous tasks covering 1..``length`` in order. A window that is not the last
    one (``final`` False) must also let the next window start later than this one did,
    which contiguity implies; it is checked first, for a clear message."""
    if not final and len(tasks) > 1 and tasks[-1].start <= 1:
        return ("the last task starts at message 1, so the next window would start where "
                "this one did and never advance")
    expected = 1
    for number, task in enumerate(tasks, start=1):
        if task.start != expected:
            return (f"task {number} starts at message {task.start}, but it must start at "
                    f"message {expected}: tasks must be contiguous, in order, from 1")
        if task.end < task.start:
            return f"task {number} ends (message {task.end}) before it starts ({task.start})"
        expected = task.end + 1
    if expected != length + 1:
        return (f"the tasks end at message {expected - 1}, but the window has {length} "
                f"messages: cover every message from 1 to {length}")
    return None
