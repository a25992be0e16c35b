"""The reply of the ``segment`` stage: the window's messages split into contiguous tasks.

The model names where each task *starts*; a task runs until the next one starts, the last
one to the end of the window. So a reply cannot leave a gap or an overlap (small models
got start/end pairs wrong more often than not), and "contiguous 1..L" comes down to:
the first task starts at message 1 and every next one later, within the window. That is
checked by :func:`cover_problem`, not by the schema: a reply that breaks it gets one
re-prompt stating the problem. An ``end`` the model adds anyway is ignored.

Bounded like the training stages' outputs (:mod:`expgit.train.components.llm_fields`):
a topic is clipped, the number of tasks is capped in the schema.
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
    """One task, starting at message ``start`` of the window (1-based)."""

    model_config = ConfigDict(json_schema_extra=strip_titles, extra="ignore")

    start: MessageNumber
    topic: Topic


class SegmentOutput(BaseModel):
    """The segmenter's reply: the tasks of one window, in order."""

    model_config = ConfigDict(json_schema_extra=strip_titles)

    tasks: list[SegmentTask] = Field(min_length=1, max_length=MAX_TASKS)


def cover_problem(tasks: Sequence[SegmentTask], length: int) -> str | None:
    """What is wrong with ``tasks`` as a split of a window of ``length`` messages, or None.

    Valid: the first task starts at message 1, each next one later than the one before,
    none after message ``length``. Then the tasks cover 1..``length`` contiguously, and a
    window with several tasks lets the next window start later than this one did."""
    previous = 0
    for number, task in enumerate(tasks, start=1):
        if number == 1 and task.start != 1:
            return (f"task 1 starts at message {task.start}: the first task must start at "
                    f"message 1")
        if task.start <= previous:
            return (f"task {number} starts at message {task.start}, not after task "
                    f"{number - 1} (message {previous}): list the tasks in order, each "
                    f"starting later than the one before")
        if task.start > length:
            return (f"task {number} starts at message {task.start}, but the window has "
                    f"only {length} messages")
        previous = task.start
    return None


def task_ranges(tasks: Sequence[SegmentTask], length: int) -> list[tuple[int, int, str]]:
    """(first, last, topic) of each task of a valid reply, 1-based and inclusive: a task
    ends where the next one starts, the last one at message ``length``."""
    starts = [t.start for t in tasks]
    ends = [s - 1 for s in starts[1:]] + [length]
    return [(t.start, end, t.topic) for t, end in zip(tasks, ends, strict=True)]
