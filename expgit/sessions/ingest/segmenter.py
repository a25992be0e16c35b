"""Task segmentation: a session's messages split into contiguous task segments, window by
window under ``[sessions] window_tokens`` (the trajectory hub's rules).

* A session of at most two messages is one segment; no LLM call.
* Otherwise, from the current start, as many messages as fit the budget (estimated
  tokens, about four bytes each) form a window, numbered 1..L; the LLM splits it into
  contiguous tasks.
* Several tasks in a window that does not reach the end: all but the last are final,
  and the next window starts at the last task's first message (that task is replaced by
  the next window's answer). One task filling the window: the next window starts right
  after it. A window that reaches the end: all its tasks are final.
* A single message over the budget forms a window of its own (shown truncated); a window
  of one message is one task, so it needs no LLM call.
* A task never starts at a ``system`` message (context such as a compaction summary):
  such a task is joined to the one before it.
* A reply that is not contiguous 1..L gets one re-prompt stating the problem; a second
  bad reply (or a failing endpoint) stops segmentation: the session stays pending from
  that window on, the segments before it are kept.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from expgit.core.domain import Message, TextPart
from expgit.llm.port import LLMError
from expgit.llm.structured import StructuredLLM
from expgit.sessions.ingest.segment_output import (
    MAX_TASKS,
    TOPIC_CHARS,
    SegmentOutput,
    cover_problem,
    task_ranges,
)
from expgit.store.format.experience import estimate_tokens
from expgit.store.format.templates import render_prompt
from expgit.store.repository import ExperienceRepository

STAGE = "segment"
SHORT_SESSION = 2  # messages: a session this short is one segment, no LLM call
TOOL_CHARS = 600  # a tool input or output as the segmenter sees it


@dataclass(frozen=True)
class Span:
    """One task segment: messages ``start`` (inclusive) to ``end`` (exclusive), 0-based."""

    start: int
    end: int
    topic: str


@dataclass
class Segmentation:
    """The segments found from the requested start on. ``resume`` None: they reach the
    end of the session; else segmentation stopped there (``reason`` says why) and must
    be resumed from that message on a later run."""

    spans: list[Span] = field(default_factory=list)
    resume: int | None = None
    reason: str | None = None
    calls: int = 0  # segment prompts sent (StructuredLLM's repair rounds not counted)


class TaskSegmenter(Protocol):
    """Splits ``messages[start:]`` into contiguous task segments.

    May assume ``0 <= start <= len(messages)`` and that ``start`` is where a segment
    begins. Must return spans that are contiguous from ``start``; when it cannot finish
    (no usable reply, endpoint failure) it returns what is final so far with ``resume``
    and ``reason`` set, never raising for the model's failures."""

    async def segment(self, messages: Sequence[Message], start: int) -> Segmentation: ...


def render_message(message: Message, limit: int | None = None) -> str:
    """A message as the segmenter sees it: its texts, and each tool call as
    ``[tool NAME(INPUT) -> OUTPUT]``; cut to ``limit`` characters if given."""
    lines: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            if part.text.strip():
                lines.append(part.text.strip())
            continue
        args = json.dumps(part.tool_input, ensure_ascii=False, sort_keys=True)
        output = "" if part.tool_output is None else f" -> {part.tool_output}"
        lines.append(f"[tool {part.tool_name}({_cut(args, TOOL_CHARS)})"
                     f"{_cut(output, TOOL_CHARS)}]")
    text = "\n".join(lines)
    return _cut(text, limit) if limit is not None else text


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = max(1, limit - 40)
    return f"{text[:keep]}\n[... {len(text) - keep} chars truncated]"


def topic_of(messages: Sequence[Message]) -> str:
    """A topic without the LLM: the first line of the first user text (else of any
    text), clipped."""
    texts = [m.plain_text for m in messages if m.role == "user"] + [
        m.plain_text for m in messages]
    first = next((t.strip().splitlines()[0] for t in texts if t.strip()), "")
    text = " ".join(first.split())
    if not text:
        return "(no text)"
    return text if len(text) <= 80 else text[:79].rstrip() + "…"


def window_end(messages: Sequence[Message], start: int, budget: int) -> int:
    """The end (exclusive) of the window from ``start``: as many messages as fit
    ``budget`` estimated tokens, and at least one."""
    end, used = start, 0
    while end < len(messages):
        cost = estimate_tokens(render_message(messages[end])) + 4  # "[n] role:" framing
        if end > start and used + cost > budget:
            break
        used += cost
        end += 1
        if used > budget:  # a single over-budget message: a window of its own
            break
    return end


def join_context_starts(messages: Sequence[Message], spans: list[Span]) -> list[Span]:
    """``spans`` with each one that starts at a ``system`` message (context: a
    compaction summary, injected instructions) joined to the span before it: context
    never starts a task."""
    joined: list[Span] = []
    for span in spans:
        if joined and messages[span.start].role == "system":
            joined[-1] = Span(joined[-1].start, span.end, joined[-1].topic)
        else:
            joined.append(span)
    return joined


class SegmentationFailed(Exception):
    pass


class LLMTaskSegmenter:
    """Segments with the ``segment`` stage (template ``prompts/segment.md.j2``) under a
    window budget of ``window_tokens``; sessions of at most two messages and windows of
    one message need no call; one re-prompt for a reply that does not cover its window."""

    def __init__(self, llm: StructuredLLM, window_tokens: int,
                 repo: ExperienceRepository | None = None) -> None:
        self.llm = llm
        self.window_tokens = window_tokens
        self.repo = repo

    async def segment(self, messages: Sequence[Message], start: int) -> Segmentation:
        total = len(messages)
        result = Segmentation()
        if start == 0 and total <= SHORT_SESSION:
            result.spans = [Span(0, total, topic_of(messages))] if total else []
            return result
        position = start
        while position < total:
            end = window_end(messages, position, self.window_tokens)
            final = end == total
            try:
                tasks = await self._tasks(messages, position, end, final, result)
            except SegmentationFailed as exc:
                result.resume, result.reason = position, str(exc)
                return result
            if final:
                result.spans += tasks
                break
            following = tasks[-1].start if len(tasks) > 1 else end
            if following <= position:  # unreachable for a checked reply; never loop
                result.resume = position
                result.reason = f"the segment reply for messages {position + 1}.." \
                                f"{end} would not advance"
                return result
            result.spans += tasks[:-1] if len(tasks) > 1 else tasks
            position = following
        return result

    async def _tasks(self, messages: Sequence[Message], start: int, end: int, final: bool,
                     result: Segmentation) -> list[Span]:
        window = messages[start:end]
        if len(window) == 1:
            return [Span(start, end, topic_of(window))]
        limit = self.window_tokens * 4
        view = [{"number": i, "role": m.role, "text": render_message(m, limit)}
                for i, m in enumerate(window, start=1)]
        problem: str | None = None
        previous: str | None = None
        for _ in range(2):
            system, user = render_prompt(
                STAGE, self.repo, messages=view, count=len(window), final=final,
                topic_chars=TOPIC_CHARS, max_tasks=MAX_TASKS, problem=problem,
                previous=previous)
            result.calls += 1
            try:
                reply = await self.llm.generate(STAGE, system, user, SegmentOutput)
            except LLMError as exc:
                raise SegmentationFailed(
                    f"segmentation of messages {start + 1}..{end} failed: "
                    f"{exc.message}") from None
            problem = cover_problem(reply.tasks, len(window))
            if problem is None:
                return join_context_starts(messages, [
                    Span(start + first - 1, start + last, topic)
                    for first, last, topic in task_ranges(reply.tasks, len(window))])
            previous = reply.model_dump_json()
        raise SegmentationFailed(f"the segment reply for messages {start + 1}..{end} was "
                                 f"invalid twice: {problem}")
