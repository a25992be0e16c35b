"""The openai adapter against a real OpenAI-compatible HTTP server on 127.0.0.1.

The server is stdlib ``http.server`` in a thread; each test scripts its replies in order
and asserts on the requests it recorded. No network beyond the loopback interface.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel

from expgit.errors import UsageError
from expgit.llm.factory import open_llm, resolve_llm
from expgit.llm.openai_chat import OpenAIChatModel, _retry_after
from expgit.llm.port import LLMError, LLMOutputError, Price, UsageMeter
from expgit.llm.structured import StructuredLLM
from expgit.store.format.settings import LLMSettings

T = TypeVar("T")


class Answer(BaseModel):
    answer: str
    confidence: float


@dataclass
class Reply:
    body: dict[str, Any] | str
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def chat(content: str, *, finish: str = "stop", prompt: int = 11, completion: int = 7,
         model: str = "served-model") -> Reply:
    return Reply({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "finish_reason": finish,
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion}})


def error(status: int, message: str, *, code: str | None = None,
          headers: dict[str, str] | None = None) -> Reply:
    return Reply({"error": {"message": message, "type": "error", "code": code}}, status,
                 headers or {})


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    json: dict[str, Any]


class FakeOpenAI:
    """Answers each POST with the next scripted :class:`Reply`; records every request."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Recorded] = []
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                payload = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append(Recorded(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, payload))
                reply = fake.replies.pop(0) if fake.replies else error(
                    599, "no scripted reply left")
                if reply.delay:
                    fake.release.wait(reply.delay)
                body = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                data = body.encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout test)
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,),
                                       daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def model_for(fake: FakeOpenAI, **kw: Any) -> OpenAIChatModel:
    options: dict[str, Any] = {"timeout_seconds": 5.0, "max_retries": 2,
                               "backoff_seconds": 0.01}
    options.update(kw)
    return OpenAIChatModel(base_url=fake.base_url, api_key="test-key", model="test-model",
                           **options)


def generate(model: OpenAIChatModel, meter: UsageMeter, mode: Any = "json_schema"
             ) -> Answer:
    async def go() -> Answer:
        async with model:
            llm = StructuredLLM(model, meter, mode=mode, max_tokens=100, temperature=0.0)
            return await llm.generate("judge", "You judge.", "Is it good?", Answer)
    return run(go())


GOOD = '{"answer": "yes", "confidence": 0.9}'


def test_json_schema_mode_sends_response_format(fake: FakeOpenAI) -> None:
    fake.script(chat(GOOD))
    meter = UsageMeter()
    assert generate(model_for(fake), meter) == Answer(answer="yes", confidence=0.9)
    [request] = fake.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer test-key"
    body = request.json
    assert body["model"] == "test-model" and body["max_tokens"] == 100
    assert body["temperature"] == 0.0
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Answer", "schema": Answer.model_json_schema()}}
    assert body["messages"] == [{"role": "system", "content": "You judge."},
                                {"role": "user", "content": "Is it good?"}]
    usage = meter.by_stage()["judge"]
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (1, 11, 7)


def test_json_object_mode_sends_schema_in_format_and_prompt(fake: FakeOpenAI) -> None:
    fake.script(chat(GOOD))
    generate(model_for(fake), UsageMeter(), mode="json_object")
    body = fake.requests[0].json
    schema = Answer.model_json_schema()
    assert body["response_format"] == {"type": "json_object", "schema": schema}
    user = body["messages"][1]["content"]
    assert user.startswith("Is it good?")
    assert json.dumps(schema, separators=(",", ":")) in user


def test_invalid_json_then_repair_counts_two_calls(fake: FakeOpenAI) -> None:
    fake.script(chat("yes, it is good", prompt=20, completion=4),
                chat(GOOD, prompt=40, completion=9))
    meter = UsageMeter({"served-model": Price(prompt_per_million=1e6,
                                              completion_per_million=2e6)})
    assert generate(model_for(fake), meter).answer == "yes"
    assert len(fake.requests) == 2
    repair = fake.requests[1].json["messages"]
    assert repair[2] == {"role": "assistant", "content": "yes, it is good"}
    assert "invalid" in repair[3]["content"] and "not JSON" in repair[3]["content"]
    assert fake.requests[1].json["response_format"]["type"] == "json_schema"
    usage = meter.by_stage()["judge"]
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (2, 60, 13)
    assert usage.cost == pytest.approx(60 * 1.0 + 13 * 2.0)


def test_invalid_twice_is_an_output_error(fake: FakeOpenAI) -> None:
    fake.script(chat("nope"), chat('{"answer": "yes"}'))
    meter = UsageMeter()
    with pytest.raises(LLMOutputError, match=r"judge: invalid reply after one repair.*"
                                             r"confidence"):
        generate(model_for(fake), meter)
    assert len(fake.requests) == 2
    assert meter.total().calls == 2


def test_429_then_success_is_retried(fake: FakeOpenAI) -> None:
    fake.script(error(429, "slow down", headers={"Retry-After": "0"}), chat(GOOD))
    model = model_for(fake, backoff_seconds=30.0)  # Retry-After: 0 must win over backoff
    meter = UsageMeter()
    started = time.monotonic()
    assert generate(model, meter).answer == "yes"
    assert time.monotonic() - started < 5
    assert len(fake.requests) == 2 and model.attempts == 2
    assert meter.total().calls == 1  # one logical call, retried inside the model


def test_429_and_500_then_success_counts_every_attempt(fake: FakeOpenAI) -> None:
    """Over a real socket: each HTTP attempt is counted on the model, the logical call
    once on the meter; a third failure would have given up (max_retries=2)."""
    fake.script(error(429, "slow down"), error(500, "boom"), chat(GOOD))
    model = model_for(fake, max_retries=2)
    meter = UsageMeter()
    assert generate(model, meter).answer == "yes"
    assert len(fake.requests) == 3 and model.attempts == 3
    assert meter.total().calls == 1
    fake.script(error(429, "slow down"), error(500, "boom"), chat(GOOD))
    with pytest.raises(LLMError, match=r"HTTP 500.*gave up after 2 attempts"):
        generate(model_for(fake, max_retries=1), UsageMeter())
    assert len(fake.requests) == 5
    fake.replies.clear()


def test_a_retry_after_past_the_deadline_ends_the_call_without_waiting(
        fake: FakeOpenAI) -> None:
    fake.script(error(503, "later", headers={"Retry-After": "100"}))
    model = model_for(fake, max_retries=3)
    model.deadline_seconds = 30.0
    started = time.monotonic()
    with pytest.raises(LLMError, match=r"per-call deadline of 30s \(1 attempt\)"):
        generate(model, UsageMeter())
    assert time.monotonic() - started < 20 and model.attempts == 1


def test_500_until_retries_are_exhausted(fake: FakeOpenAI) -> None:
    fake.script(*[error(500, "boom")] * 3)
    with pytest.raises(LLMError, match=r"HTTP 500.*gave up after 3 attempts") as info:
        generate(model_for(fake, max_retries=2), UsageMeter())
    assert not isinstance(info.value, LLMOutputError)
    assert len(fake.requests) == 3


def test_length_is_a_failure_without_repair(fake: FakeOpenAI) -> None:
    fake.script(chat('{"answer": "ye', finish="length"))
    meter = UsageMeter()
    with pytest.raises(LLMOutputError, match="finish_reason=length") as info:
        generate(model_for(fake), meter)
    # the cause is the same words for every call cut off the same way: runs count by it
    assert info.value.cause.startswith("reply cut off at ") and not info.value.transport
    assert len(fake.requests) == 1
    assert meter.total().calls == 1


@pytest.mark.slow
def test_timeout_is_retried_then_reported(fake: FakeOpenAI) -> None:
    fake.script(Reply(chat(GOOD).body, delay=3), Reply(chat(GOOD).body, delay=3))
    model = model_for(fake, timeout_seconds=0.5, max_retries=1)
    started = time.monotonic()
    with pytest.raises(LLMError, match="timed out") as info:
        generate(model, UsageMeter())
    assert time.monotonic() - started < 2.5
    assert len(fake.requests) == 2
    assert info.value.hint is not None and "timeout_seconds" in info.value.hint
    assert info.value.cause == "timed out (0.5s per request)" and info.value.transport


@pytest.mark.slow
def test_a_hung_endpoint_ends_at_the_per_call_deadline(fake: FakeOpenAI) -> None:
    """Timeouts of 1 s and 5 retries would take over 6 s; the 1.5 s deadline ends the
    call after the second attempt, cut to what is left of it."""
    fake.script(*(Reply(chat(GOOD).body, delay=3) for _ in range(6)))
    model = model_for(fake, timeout_seconds=1.0, max_retries=5)
    model.deadline_seconds = 1.5
    started = time.monotonic()
    with pytest.raises(LLMError, match=r"per-call deadline of 1\.5s") as info:
        generate(model, UsageMeter())
    assert time.monotonic() - started < 3.0
    assert len(fake.requests) == 2
    assert info.value.hint is not None and "call_deadline_seconds" in info.value.hint
    fake.replies.clear()


def test_client_errors_are_not_retried_and_carry_hints(fake: FakeOpenAI) -> None:
    fake.script(error(401, "bad key"))
    with pytest.raises(LLMError, match="HTTP 401") as info:
        generate(model_for(fake), UsageMeter())
    assert info.value.hint is not None and "OPENAI_API_KEY" in info.value.hint
    assert len(fake.requests) == 1


def test_refused_response_format_is_not_retried(fake: FakeOpenAI) -> None:
    # llama.cpp's server answers an unknown response_format with HTTP 500.
    fake.script(error(500, "body.response_format.type: Input should be 'text' or "
                           "'json_object'"))
    with pytest.raises(LLMError) as info:
        generate(model_for(fake), UsageMeter())
    assert info.value.hint is not None and "structured_output" in info.value.hint
    assert len(fake.requests) == 1


def test_quota_and_overlong_retry_after_are_not_retried(fake: FakeOpenAI) -> None:
    fake.script(error(429, "quota", code="insufficient_quota"),
                error(429, "later", headers={"Retry-After": "3600"}))
    for expected in ("no quota left", "asks to wait 3600s"):
        with pytest.raises(LLMError) as info:
            generate(model_for(fake), UsageMeter())
        assert expected in f"{info.value.message} {info.value.hint}"
    assert len(fake.requests) == 2


def test_unreachable_endpoint() -> None:
    with FakeOpenAIClosed() as url:
        model = OpenAIChatModel(base_url=url, api_key=None, model="m", max_retries=1,
                                backoff_seconds=0.01, timeout_seconds=2)
        with pytest.raises(LLMError, match="could not be reached after 2 attempts"):
            generate(model, UsageMeter())


class FakeOpenAIClosed:
    """A base URL on a port nothing listens on."""

    def __enter__(self) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
        port = server.server_address[1]
        server.server_close()
        return f"http://127.0.0.1:{port}/v1"

    def __exit__(self, *exc: object) -> None:
        pass


def test_malformed_body_is_an_llm_error(fake: FakeOpenAI) -> None:
    fake.script(Reply("<html>not json</html>"))
    with pytest.raises(LLMError):
        generate(model_for(fake), UsageMeter())


def test_retry_after_forms() -> None:
    assert _retry_after({"retry-after-ms": "1500"}) == 1.5
    assert _retry_after({"retry-after": "2"}) == 2.0
    assert _retry_after({"retry-after": "-4"}) == 0.0
    assert _retry_after({"retry-after": "soon"}) is None
    assert _retry_after({}) is None
    later = _retry_after({"retry-after": formatdate(time.time() + 30, usegmt=True)})
    assert later is not None and 25 < later <= 31


def test_embeddings_use_the_embeddings_model_in_order(fake: FakeOpenAI) -> None:
    fake.script(Reply({"object": "list", "model": "emb", "usage": {"prompt_tokens": 2,
                                                                   "total_tokens": 2},
                       "data": [{"object": "embedding", "index": 1, "embedding": [0.0, 1.0]},
                                {"object": "embedding", "index": 0, "embedding": [1.0, 0.0]}]}))
    model = model_for(fake, embeddings_model="emb")

    async def go() -> tuple[list[list[float]], list[list[float]]]:
        async with model:
            return await model.embed(["a", "b"], stage="estimate"), await model.embed(
                [], stage="estimate")

    vectors, empty = run(go())
    assert vectors == [[1.0, 0.0], [0.0, 1.0]] and empty == []
    [request] = fake.requests
    assert request.path == "/v1/embeddings"
    assert request.json["model"] == "emb" and request.json["input"] == ["a", "b"]


def test_embeddings_without_a_model_fail_before_any_request(fake: FakeOpenAI) -> None:
    with pytest.raises(LLMError, match="no embeddings model"):
        run(model_for(fake).embed(["a"], stage="estimate"))
    assert fake.requests == []


def test_open_llm_against_an_endpoint(fake: FakeOpenAI) -> None:
    fake.script(chat(GOOD, model="gpt-test"))
    settings = LLMSettings(model="gpt-test", structured_output="json_object",
                           prices={"gpt-test": Price(prompt_per_million=1e6)},
                           embeddings_model="emb-1")

    async def go() -> tuple[Answer, str, bool]:
        async with open_llm(settings, choice=None, model=None, base_url=fake.base_url,
                            meter=None, environ={}) as llm:
            answer = await llm.structured.generate("judge", "s", "u", Answer)
            return answer, llm.description, llm.embeddings is not None

    answer, description, has_embeddings = run(go())
    assert answer.answer == "yes" and has_embeddings
    assert description == f"gpt-test at {fake.base_url}"
    body = fake.requests[0].json
    assert body["model"] == "gpt-test" and body["response_format"]["type"] == "json_object"


def test_open_llm_counts_cost_with_the_settings_price_table(fake: FakeOpenAI) -> None:
    fake.script(chat(GOOD, model="gpt-test", prompt=100, completion=10))
    settings = LLMSettings(model="gpt-test", prices={"gpt-test": Price(
        prompt_per_million=1.0, completion_per_million=10.0)})
    meter = UsageMeter()
    runtime = open_llm(settings, choice="openai", model=None, base_url=fake.base_url,
                       meter=meter, environ={})

    async def go() -> None:
        async with runtime as llm:
            await llm.structured.generate("merge", "s", "u", Answer)
            assert llm.embeddings is None

    run(go())
    assert meter.by_stage()["merge"].cost == pytest.approx((100 * 1.0 + 10 * 10.0) / 1e6)
    with pytest.raises(RuntimeError, match="not open"):
        _ = runtime.structured


def test_resolution_order() -> None:
    settings = LLMSettings(base_url="http://toml/v1", model="toml-model",
                           api_key_env="MY_KEY")
    env = {"OPENAI_BASE_URL": "http://env/v1", "MY_KEY": "k1", "OPENAI_API_KEY": "other"}
    flag = resolve_llm(settings, choice=None, model="m2", base_url="http://flag/v1",
                       environ=env)
    assert (flag.choice, flag.base_url, flag.api_key, flag.model) == (
        "openai", "http://flag/v1", "k1", "m2")
    assert resolve_llm(settings, choice=None, model=None, base_url=None,
                       environ=env).base_url == "http://env/v1"
    toml = resolve_llm(settings, choice=None, model=None, base_url=None, environ={})
    assert (toml.choice, toml.base_url, toml.api_key, toml.model, toml.mode) == (
        "openai", "http://toml/v1", None, "toml-model", "json_schema")
    key_only = resolve_llm(LLMSettings(), choice=None, model=None, base_url=None,
                           environ={"OPENAI_API_KEY": "sk"})
    assert (key_only.choice, key_only.base_url, key_only.api_key) == ("openai", None, "sk")


def test_openai_without_any_endpoint_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="needs an endpoint") as info:
        resolve_llm(LLMSettings(), choice="openai", model=None, base_url=None, environ={})
    assert info.value.exit_code == 2
    assert info.value.hint is not None and "OPENAI_API_KEY" in info.value.hint


def test_a_seeded_client_sends_its_seed_and_an_endpoint_none(fake: FakeOpenAI) -> None:
    """The embedded model's client is seeded (LOCAL_SEED), so its replies repeat."""
    from expgit.llm.factory import LOCAL_SEED

    fake.script(chat(GOOD), chat(GOOD))
    seeded = model_for(fake, seed=LOCAL_SEED)
    generate(seeded, UsageMeter())
    generate(model_for(fake), UsageMeter())
    assert fake.requests[0].json["seed"] == LOCAL_SEED
    assert "seed" not in fake.requests[1].json


def test_a_call_with_its_own_sampling_sends_its_temperature_and_seed(fake: FakeOpenAI
                                                                      ) -> None:
    """A group's run (Sampling): its temperature and seed, over the client's fixed seed;
    the next call without one is back to the runtime's temperature and the fixed seed."""
    from expgit.llm.port import Sampling

    fake.script(chat("a"), chat("b"))

    async def go() -> list[str]:
        async with model_for(fake, seed=5) as model:
            llm = StructuredLLM(model, UsageMeter(), max_tokens=100, temperature=0.0)
            messages = [{"role": "user", "content": "hi"}]
            return [await llm.text("rollout", messages, Sampling(0.9, seed=3)),
                    await llm.text("rollout", messages)]

    assert run(go()) == ["a", "b"]
    sampled, plain = (r.json for r in fake.requests)
    assert (sampled["temperature"], sampled["seed"]) == (0.9, 3)
    assert (plain["temperature"], plain["seed"]) == (0.0, 5)


def test_the_local_runtime_samples_at_temperature_0() -> None:
    from expgit.llm.factory import LLMRuntime, ResolvedLLM
    from expgit.llm.scripted import ScriptedChatModel

    settings = LLMSettings(temperature=0.7)
    local = LLMRuntime(settings, ResolvedLLM("local", "smol", None, None, "json_object"),
                       UsageMeter())
    remote = LLMRuntime(settings, ResolvedLLM("openai", "gpt", None, None, "json_object"),
                        UsageMeter())
    for runtime in (local, remote):
        runtime._wire(ScriptedChatModel([]), None)
    assert (local.structured.temperature, remote.structured.temperature) == (0.0, 0.7)


def test_a_tool_calling_turn_sends_tools_and_returns_the_calls(fake: FakeOpenAI) -> None:
    """complete_tools: tools= in the request, the calls back unparsed, the retries of
    every call (a 503 first), usage counted once under its stage."""
    tools = [{"type": "function", "function": {"name": "cancel_reservation", "parameters": {
        "type": "object", "properties": {"reservation_id": {"type": "string"}}}}}]
    reply = chat("")
    assert isinstance(reply.body, dict)
    reply.body["choices"][0]["finish_reason"] = "tool_calls"
    reply.body["choices"][0]["message"] = {"role": "assistant", "content": None,
                                           "tool_calls": [{
        "id": "call_1", "type": "function", "function": {
            "name": "cancel_reservation", "arguments": '{"reservation_id": "ZFA04Y"}'}}]}
    fake.script(error(503, "busy", headers={"Retry-After": "0"}), reply)
    meter = UsageMeter()

    async def go() -> Any:
        async with model_for(fake) as model:
            llm = StructuredLLM(model, meter, max_tokens=100, temperature=0.0)
            return await llm.tools("rollout", [{"role": "user", "content": "cancel"}], tools)

    turn = run(go())
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("call_1", "cancel_reservation", '{"reservation_id": "ZFA04Y"}')]
    assert turn.text == "" and len(fake.requests) == 2
    assert fake.requests[-1].json["tools"] == tools
    assert meter.by_stage()["rollout"].calls == 1
    assert meter.by_stage()["rollout"].prompt_tokens == 11
