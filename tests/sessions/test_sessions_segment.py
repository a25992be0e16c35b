"""The segmentation window algorithm against the strict scripted LLM."""

from __future__ import annotations

import asyncio
import json

from expgit.core.domain import Message
from expgit.llm.port import ChatMessages, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.sessions.ingest.segmenter import LLMTaskSegmenter, Segmentation, Span, render_message
from expgit.store.format.experience import estimate_tokens

# Every message below renders to 40 characters: 10 estimated tokens, plus 4 of framing.
PER_MESSAGE = 14
BUDGET = 6 * PER_MESSAGE  # six messages per window


def msg(number: int, role: str = "") -> Message:
    kind = role or ("user" if number % 2 else "assistant")
    text = f"message {number:02d} " + "x" * 29  # 40 characters
    assert estimate_tokens(text) + 4 == PER_MESSAGE
    return Message.text(kind, text)  # type: ignore[arg-type]


def conversation(count: int) -> list[Message]:
    return [msg(n) for n in range(1, count + 1)]


def reply(*tasks: tuple[int, str]) -> str:
    """A segment reply: where each task starts, and its topic."""
    return json.dumps({"tasks": [{"start": s, "topic": t} for s, t in tasks]})


def window_of(messages: ChatMessages) -> list[str]:
    """The message labels (``message NN``) the prompt showed, in order."""
    user = messages[1]["content"]
    return [line.split()[1] for line in user.splitlines() if line.startswith("message ")]


def expecting(first: int, last: int, answer: str):  # type: ignore[no-untyped-def]
    """A reply function that checks the window it is shown (1-based message numbers)."""
    def check(messages: ChatMessages) -> str:
        shown = window_of(messages)
        assert shown == [f"{n:02d}" for n in range(first, last + 1)], shown
        return answer
    return check


def run(chat: ScriptedChatModel, messages: list[Message], start: int = 0,
        budget: int = BUDGET) -> Segmentation:
    segmenter = LLMTaskSegmenter(StructuredLLM(chat, UsageMeter()), budget)
    return asyncio.run(segmenter.segment(messages, start))


def spans(result: Segmentation) -> list[tuple[int, int]]:
    return [(s.start, s.end) for s in result.spans]


def test_several_windows_overlap_and_the_last_task_is_replaced() -> None:
    # The seed's example: window 1 = 1..6 -> A=1..3, B=4..6; window 2 starts at B (4..9)
    # -> B'=4..7, C=8..9; window 3 starts at C (8..10), the end -> C'=8..10.
    chat = ScriptedChatModel([
        Step("segment", expecting(1, 6, reply((1, "A"), (4, "B")))),
        Step("segment", expecting(4, 9, reply((1, "B longer"), (5, "C")))),
        Step("segment", expecting(8, 10, reply((1, "C whole")))),
    ])
    result = run(chat, conversation(10))
    chat.assert_done()
    assert spans(result) == [(0, 3), (3, 7), (7, 10)]
    assert [s.topic for s in result.spans] == ["A", "B longer", "C whole"]
    assert result.resume is None and result.reason is None and result.calls == 3


def test_one_task_filling_the_window_moves_on_without_overlap() -> None:
    chat = ScriptedChatModel([
        Step("segment", expecting(1, 6, reply((1, "one long task")))),
        Step("segment", expecting(7, 8, reply((1, "short"), (2, "other")))),
    ])
    result = run(chat, conversation(8))
    chat.assert_done()
    assert spans(result) == [(0, 6), (6, 7), (7, 8)]


def test_an_invalid_reply_is_reprompted_once_with_the_problem() -> None:
    chat = ScriptedChatModel([
        Step("segment", reply((1, "a"), (3, "b"), (2, "c"))),  # out of order
        Step("segment", reply((1, "a"), (3, "b"))),
    ])
    result = run(chat, conversation(5))
    chat.assert_done()
    assert spans(result) == [(0, 2), (2, 5)]  # a task runs until the next one starts
    second = chat.calls[1][1][1]["content"]
    assert "Problem: task 3 starts at message 2, not after task 2 (message 3)" in second
    assert '"topic":"c"' in second  # the previous reply is shown back
    assert "Problem:" not in chat.calls[0][1][1]["content"]


def test_an_end_the_model_adds_is_ignored() -> None:
    """Ends are implied by the next start: a reply cannot leave a gap or an overlap."""
    answer = json.dumps({"tasks": [{"start": 1, "end": 1, "topic": "a"},
                                   {"start": 4, "end": 9, "topic": "b"}]})
    chat = ScriptedChatModel([Step("segment", answer)])
    result = run(chat, conversation(5))
    chat.assert_done()
    assert spans(result) == [(0, 3), (3, 5)]


def test_an_invalid_reply_twice_leaves_the_rest_pending() -> None:
    chat = ScriptedChatModel([
        Step("segment", reply((1, "A"), (4, "B"))),
        Step("segment", reply((1, "B"), (7, "C"))),  # window 4..9 has 6 messages
        Step("segment", reply((2, "B"))),  # does not start at 1
    ])
    result = run(chat, conversation(10))
    chat.assert_done()
    assert spans(result) == [(0, 3)]  # A is final; B waits for the retry
    assert result.resume == 3
    assert "the window has only 6 messages" in chat.calls[2][1][1]["content"]
    assert result.reason is not None and "invalid twice" in result.reason
    assert "messages 4..9" in result.reason and "must start at message 1" in result.reason


def test_unusable_json_twice_leaves_the_session_pending() -> None:
    chat = ScriptedChatModel([Step("segment", "not json"), Step("segment", "{}")])
    result = run(chat, conversation(4))
    chat.assert_done()
    assert result.spans == [] and result.resume == 0
    assert result.reason is not None and "segmentation of messages 1..4 failed" in result.reason


def test_a_reply_that_would_not_advance_is_invalid() -> None:
    """Two tasks both at message 1: the next window would start where this one did."""
    chat = ScriptedChatModel([
        Step("segment", reply((1, "all"), (1, "all again"))),
        Step("segment", reply((1, "a"), (3, "b"))),
        Step("segment", expecting(3, 7, reply((1, "b")))),
    ])
    result = run(chat, conversation(7))
    chat.assert_done()
    assert "task 2 starts at message 1, not after task 1 (message 1)" in \
        chat.calls[1][1][1]["content"]
    assert spans(result) == [(0, 2), (2, 7)]


def test_an_over_budget_message_is_a_window_of_its_own_without_a_call() -> None:
    messages = conversation(6)
    huge = "H" * (BUDGET * 4 * 3)
    messages[2] = Message.text("assistant", huge)  # message 3
    chat = ScriptedChatModel([
        Step("segment", expecting(1, 2, reply((1, "first")))),
        Step("segment", expecting(4, 6, reply((1, "last")))),
    ])
    result = run(chat, messages)
    chat.assert_done()
    assert spans(result) == [(0, 2), (2, 3), (3, 6)]
    assert result.spans[1].topic  # from the message itself, no model needed
    assert all(huge not in m["content"] for _, call, _ in chat.calls for m in call)


def test_short_sessions_and_single_message_windows_make_no_call() -> None:
    chat = ScriptedChatModel([])
    assert spans(run(chat, conversation(2))) == [(0, 2)]
    assert spans(run(chat, conversation(1))) == [(0, 1)]
    assert run(chat, []).spans == []
    # resuming at the last message: a window of one message
    result = run(chat, conversation(5), start=4)
    assert result.spans == [Span(4, 5, "message 05 " + "x" * 29)]
    assert chat.calls == []


def test_resume_from_the_middle_numbers_the_window_from_one() -> None:
    chat = ScriptedChatModel([Step("segment", expecting(5, 8, reply((1, "tail"))))])
    result = run(chat, conversation(8), start=4)
    chat.assert_done()
    assert spans(result) == [(4, 8)]
    assert "[1] user:" in chat.calls[0][1][1]["content"]


def test_tool_calls_are_shown_to_the_segmenter() -> None:
    from expgit.core.domain import ToolPart

    message = Message(role="assistant", parts=[ToolPart(
        tool_id="t1", tool_name="read_file", tool_input={"path": "a.py"},
        tool_output="print(1)")])
    assert render_message(message) == '[tool read_file({"path": "a.py"}) -> print(1)]'
