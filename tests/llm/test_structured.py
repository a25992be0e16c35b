"""StructuredLLM's modes, repair round and failures, driven by the strict scripted model."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel

from expgit.llm.factory import LLMRuntime
from expgit.llm.port import LLMOutputError, Price, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, ScriptError, Step
from expgit.llm.structured import Mode, StructuredLLM, parse_json_reply


class Verdict(BaseModel):
    passed: bool
    reason: str


GOOD = '{"passed": true, "reason": "matches"}'
SCHEMA_NOTE = json.dumps(Verdict.model_json_schema(), separators=(",", ":"))


def generate(model: ScriptedChatModel, mode: Mode, meter: UsageMeter | None = None
             ) -> Verdict:
    llm = StructuredLLM(model, meter or UsageMeter(), mode=mode)
    return asyncio.run(llm.generate("judge", "You judge.", "Case: 2+2=4?", Verdict))


def test_prompt_mode_puts_the_schema_in_the_prompt_only() -> None:
    model = ScriptedChatModel([Step("judge", GOOD)])
    assert generate(model, "prompt") == Verdict(passed=True, reason="matches")
    [(stage, messages, response_format)] = model.calls
    assert stage == "judge" and response_format is None
    assert messages[0] == {"role": "system", "content": "You judge."}
    assert messages[1]["content"].startswith("Case: 2+2=4?")
    assert SCHEMA_NOTE in messages[1]["content"]
    model.assert_done()


def test_fenced_json_is_accepted() -> None:
    model = ScriptedChatModel([Step("judge", f"```json\n{GOOD}\n```\n")])
    assert generate(model, "prompt").passed is True
    model.assert_done()
    assert parse_json_reply(f"```\n{GOOD}\n```", Verdict).reason == "matches"


def test_json_schema_mode_keeps_the_prompt_clean() -> None:
    model = ScriptedChatModel([Step("judge", GOOD)])
    generate(model, "json_schema")
    [(_, messages, response_format)] = model.calls
    assert response_format == {"type": "json_schema", "json_schema": {
        "name": "Verdict", "schema": Verdict.model_json_schema()}}
    assert messages[1]["content"] == "Case: 2+2=4?"
    model.assert_done()


def test_json_object_mode_sends_the_schema_twice() -> None:
    model = ScriptedChatModel([Step("judge", GOOD)])
    generate(model, "json_object")
    [(_, messages, response_format)] = model.calls
    assert response_format == {"type": "json_object", "schema": Verdict.model_json_schema()}
    assert SCHEMA_NOTE in messages[1]["content"]
    model.assert_done()


@pytest.mark.parametrize("bad", ["I think it passed.", '{"passed": "maybe"}'])
def test_one_repair_round(bad: str) -> None:
    model = ScriptedChatModel([Step("judge", bad), Step("judge", GOOD)])
    meter = UsageMeter()
    assert generate(model, "prompt", meter).reason == "matches"
    model.assert_done()
    repair = model.calls[1][1]
    assert repair[:2] == model.calls[0][1]
    assert repair[2] == {"role": "assistant", "content": bad}
    assert repair[3]["role"] == "user" and "invalid" in repair[3]["content"]
    assert SCHEMA_NOTE in repair[3]["content"]
    assert meter.by_stage()["judge"].calls == 2


def test_invalid_twice_fails_with_the_reason() -> None:
    model = ScriptedChatModel([Step("judge", "nope"), Step("judge", '{"passed": true}')])
    meter = UsageMeter()
    with pytest.raises(LLMOutputError, match=r"judge: invalid reply after one repair round"
                                             r".*reason: Field required"):
        generate(model, "json_schema", meter)
    model.assert_done()
    assert meter.total().calls == 2


def test_length_fails_without_a_repair_call() -> None:
    model = ScriptedChatModel([Step("judge", '{"passed": tr', finish_reason="length")])
    meter = UsageMeter()
    with pytest.raises(LLMOutputError, match="finish_reason=length"):
        generate(model, "json_object", meter)
    model.assert_done()  # exactly one call was scripted, and it was the only one made
    assert len(model.calls) == 1 and meter.total().calls == 1


def test_text_is_one_plain_call() -> None:
    model = ScriptedChatModel([Step("rollout", "The answer is 4.")])
    meter = UsageMeter()
    llm = StructuredLLM(model, meter)
    reply = asyncio.run(llm.text("rollout", [{"role": "user", "content": "2+2?"}]))
    assert reply == "The answer is 4."
    assert model.calls[0][2] is None
    assert meter.by_stage()["rollout"].calls == 1
    model.assert_done()


def test_the_scripted_model_is_strict() -> None:
    model = ScriptedChatModel([Step("judge", GOOD), Step("merge", "{}")])
    generate(model, "prompt")
    with pytest.raises(ScriptError, match="never made"):
        model.assert_done()
    with pytest.raises(ScriptError, match="no scripted step"):
        generate(model, "prompt")


def test_meter_prices_by_model_and_wildcard() -> None:
    meter = UsageMeter({"scripted": Price(prompt_per_million=2.0, completion_per_million=4.0),
                        "*": Price(prompt_per_million=100.0)})
    model = ScriptedChatModel([Step("judge", GOOD)])
    generate(model, "prompt", meter)
    usage = meter.by_stage()["judge"]
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.cost == pytest.approx(
        (usage.prompt_tokens * 2.0 + usage.completion_tokens * 4.0) / 1e6)


def test_fixed_runtime_wraps_a_given_model() -> None:
    model = ScriptedChatModel([Step("estimate", GOOD)])

    async def go() -> Verdict:
        async with LLMRuntime.fixed(model, mode="prompt") as llm:
            assert llm.chat is model and llm.embeddings is None
            assert llm.description == "scripted (in-process)"
            verdict = await llm.structured.generate("estimate", "s", "u", Verdict)
            assert llm.meter.by_stage()["estimate"].calls == 1
            return verdict

    assert asyncio.run(go()).passed is True
    model.assert_done()
