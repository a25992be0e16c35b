"""Structured output: prompts from templates, replies validated with pydantic.

Modes (``[llm] structured_output`` in expgit.toml):

* ``json_schema`` (default): ``response_format={"type": "json_schema", ...}``;
* ``json_object``: ``{"type": "json_object", "schema": ...}`` and the schema in the
  prompt (llama.cpp's server accepts this form, not ``json_schema``); with
  ``schema_in_prompt=False`` the prompt only asks for JSON: the embedded server enforces
  the schema as a grammar, and a small model reading the schema copies its names
  ("EstimatedEdit", "$defs") into its answer;
* ``prompt``: no ``response_format``; the schema is only in the prompt.

Every reply is validated; an invalid one gets exactly one repair round. A reply cut off
by the token limit (``finish_reason == "length"``) is a failure, never repaired.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import weakref
from collections.abc import Iterator
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from expgit.llm.port import (
    ChatMessages,
    ChatModel,
    Completion,
    LLMError,
    LLMOutputError,
    Sampling,
    ToolCallingModel,
    ToolMessages,
    ToolTurn,
    UsageMeter,
)

T = TypeVar("T", bound=BaseModel)
C = TypeVar("C", bound=Completion)
Mode = Literal["json_schema", "json_object", "prompt"]
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```\s*$", re.S)
_SCHEMAS: weakref.WeakKeyDictionary[type[BaseModel], tuple[dict[str, Any], str]] = \
    weakref.WeakKeyDictionary()
_SCHEMAS_LOCK = threading.Lock()


def output_schema(output: type[BaseModel]) -> tuple[dict[str, Any], str]:
    """(JSON Schema, its compact JSON text) of an output model, computed once per model
    class (pydantic rebuilds it on every ``model_json_schema()`` call: milliseconds). A
    model class does not change once defined; the schema is shared, never to be mutated."""
    with _SCHEMAS_LOCK:
        cached = _SCHEMAS.get(output)
    if cached is None:
        schema = output.model_json_schema()
        cached = (schema, json.dumps(schema, separators=(",", ":")))
        with _SCHEMAS_LOCK:
            _SCHEMAS[output] = cached
    return cached


# Keys whose bounds a grammar-compiling server (llama.cpp, Ollama) spells out rule by rule:
# a long maxLength becomes thousands of rules and the server refuses the grammar, or dies.
_GRAMMAR_BOUNDS = ("maxLength", "maxItems", "maxProperties")
_WIRE: weakref.WeakKeyDictionary[type[BaseModel], dict[str, Any]] = \
    weakref.WeakKeyDictionary()


def _unbounded(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _unbounded(value) for key, value in node.items()
                if key not in _GRAMMAR_BOUNDS
                and not (key == "pattern" and "{" in str(value))}
    if isinstance(node, list):
        return [_unbounded(item) for item in node]
    return node


def wire_schema(output: type[BaseModel], *, bounded: bool = False) -> dict[str, Any]:
    """The schema sent to the endpoint. Without ``bounded``, length and count bounds (and
    patterns with repetition counts) are left out: every OpenAI-compatible server can
    compile it, and :func:`parse_json_reply` still enforces them on the reply. The embedded
    server (``bounded``) keeps them: its converter is patched to handle them, and the
    grammar is what makes a small model stop."""
    schema = output_schema(output)[0]
    if bounded:
        return schema
    with _SCHEMAS_LOCK:
        cached = _WIRE.get(output)
    if cached is None:
        cached = _unbounded(schema)
        with _SCHEMAS_LOCK:
            _WIRE[output] = cached
    return cached


def parse_json_reply(text: str, output: type[T]) -> T:
    """Validate a reply as ``output``; tolerates a ```json fence around it."""
    stripped = text.strip()
    match = _FENCE.match(stripped)
    payload = match.group(1) if match else stripped
    try:
        data = json.loads(payload)
    except ValueError as exc:
        raise LLMOutputError(f"the reply is not JSON: {exc}",
                             cause="a reply that is not JSON") from None
    try:
        return output.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}"
                             for e in exc.errors()[:8])
        raise LLMOutputError(f"the reply does not match the schema: {problems}",
                             cause="a reply that does not match the schema") from None


class StructuredLLM:
    def __init__(self, model: ChatModel, meter: UsageMeter, *, mode: Mode = "json_schema",
                 max_tokens: int = 2048, temperature: float = 0.2,
                 schema_in_prompt: bool = True, grammar_bounds: bool = False) -> None:
        self.grammar_bounds = grammar_bounds  # see wire_schema
        self.model = model
        self.meter = meter
        self.mode = mode
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.schema_in_prompt = schema_in_prompt

    def _format(self, output: type[BaseModel]) -> dict[str, Any] | None:
        schema = wire_schema(output, bounded=self.grammar_bounds)
        if self.mode == "json_schema":
            return {"type": "json_schema",
                    "json_schema": {"name": output.__name__, "schema": schema}}
        if self.mode == "json_object":
            return {"type": "json_object", "schema": schema}
        return None

    def _schema_note(self, output: type[BaseModel]) -> str:
        if not self.schema_in_prompt:
            return "\n\nReply with exactly one JSON object, no other text."
        return ("\n\nReply with exactly one JSON object, no other text, matching this JSON "
                f"Schema:\n{output_schema(output)[1]}")  # the bounds too: the model reads them

    @contextlib.contextmanager
    def _counted(self, stage: str) -> Iterator[None]:
        """A public call: its failure counted by cause (and told to the run's guard)."""
        try:
            yield
        except LLMError as exc:
            self.meter.failed(stage, exc)
            raise
        if self.meter.guard is not None:
            self.meter.guard.succeeded()

    async def _complete(self, messages: ChatMessages, stage: str, fmt: dict[str, Any] | None,
                        max_tokens: int, sampling: Sampling | None = None) -> Completion:
        if self.meter.guard is not None:
            self.meter.guard.check(stage)
        self.meter.started(stage)
        completion = await self.model.complete(
            messages, stage=stage, response_format=fmt, max_tokens=max_tokens,
            **self._sampling(sampling))
        self.meter.record(stage, completion)
        return completion

    async def _call(self, messages: ChatMessages, stage: str, fmt: dict[str, Any] | None,
                    sampling: Sampling | None = None) -> str:
        completion = await self._complete(messages, stage, fmt, self.max_tokens, sampling)
        return self._whole(stage, completion).text

    def _whole(self, stage: str, completion: C) -> C:
        """The completion, or LLMOutputError when the token limit cut it off."""
        if completion.finish_reason == "length":
            cut = f"reply cut off at {self.max_tokens} tokens (finish_reason=length)"
            raise LLMOutputError(f"{stage}: the {cut}", cause=cut)
        return completion

    def _sampling(self, sampling: Sampling | None) -> dict[str, Any]:
        """The keywords of a model call: the runtime's temperature, or the call's own
        temperature and seed (``seed`` only when there is one: fakes may lack it)."""
        if sampling is None:
            return {"temperature": self.temperature}
        extra: dict[str, Any] = {"seed": sampling.seed} if sampling.seed is not None else {}
        return {"temperature": sampling.temperature, **extra}

    async def text(self, stage: str, messages: ChatMessages,
                   sampling: Sampling | None = None) -> str:
        """A free-text reply (one call), e.g. the agent's answer in a rollout;
        ``sampling``: this call's own temperature and seed (a group's run)."""
        with self._counted(stage):
            return await self._call(messages, stage, None, sampling)

    async def capped_text(self, stage: str, messages: ChatMessages, cap: int,
                          sampling: Sampling | None = None) -> tuple[str, bool]:
        """A free-text reply of at most ``cap`` tokens (one call), and whether it reached
        the cap: such a reply is kept as written, not a failure (the embedded model's
        rollouts: a 135M model rambles on past any answer it gives)."""
        with self._counted(stage):
            completion = await self._complete(messages, stage, None,
                                              min(cap, self.max_tokens), sampling)
            return completion.text, completion.finish_reason == "length"

    async def tools(self, stage: str, messages: ToolMessages, tools: list[dict[str, Any]],
                    sampling: Sampling | None = None) -> ToolTurn:
        """One tool-calling turn (the model's ``complete_tools``), counted like any call;
        LLMError if the model cannot call tools, or its reply was cut off."""
        with self._counted(stage):
            if self.meter.guard is not None:
                self.meter.guard.check(stage)
            if not isinstance(self.model, ToolCallingModel):
                raise LLMError(f"{stage}: the model {self.model.model!r} cannot call tools",
                               hint="use an OpenAI-compatible endpoint (--base-url)",
                               cause="a model without tool calling")
            turn = await self.model.complete_tools(messages, tools, stage=stage,
                                                   max_tokens=self.max_tokens,
                                                   **self._sampling(sampling))
            self.meter.record(stage, turn)
            return self._whole(stage, turn)

    async def generate(self, stage: str, system: str, user: str, output: type[T]) -> T:
        """One validated object of type ``output`` (at most two calls: ask, repair)."""
        with self._counted(stage):
            return await self._generate(stage, system, user, output)

    async def _generate(self, stage: str, system: str, user: str, output: type[T]) -> T:
        if self.mode != "json_schema":
            user += self._schema_note(output)
        messages: ChatMessages = [{"role": "system", "content": system},
                                  {"role": "user", "content": user}]
        fmt = self._format(output)
        text = await self._call(messages, stage, fmt)
        try:
            return parse_json_reply(text, output)
        except LLMOutputError as first:
            repair = [
                *messages,
                {"role": "assistant", "content": text},
                {"role": "user", "content": f"That reply was invalid: {first.message}. "
                 "Reply again with only the corrected JSON object." + self._schema_note(output)},
            ]
            text = await self._call(repair, f"{stage}", fmt)
            try:
                return parse_json_reply(text, output)
            except LLMOutputError as second:
                raise LLMOutputError(f"{stage}: invalid reply after one repair round: "
                                     f"{second.message}",
                                     cause=f"{second.cause}, also after one repair round"
                                     ) from None
