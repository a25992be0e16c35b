"""The production chat and embedding model: the ``openai`` client against any
OpenAI-compatible ``base_url`` (OpenAI, vLLM, llama.cpp's server, ...).

Transient failures (408/409/429/5xx, timeouts, connection errors) are retried by expgit's
one retry policy (:mod:`expgit.llm.retry`: exponential backoff with jitter), honouring
``Retry-After`` / ``retry-after-ms`` and ``x-should-retry``. The client's own retries
are off: their policy also retries an exhausted quota (429 ``insufficient_quota``) and
llama.cpp's refusal of a ``response_format`` (a 500), knows no deadline over a call's
attempts, and does not say how many attempts it made (``_retries_taken`` is private;
an HTTP event hook would touch the HTTP layer below), which are counted here
(``attempts``). Every failure leaves as
:class:`~expgit.llm.port.LLMError`, with a hint when the cause is a configuration
problem (key, model, response format).

The client's HTTP layer (``httpx`` in openai 1.x, the ``httpx2`` fork in 3.x) is never
touched directly: only ``openai``'s own exception types and response objects are used.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import openai

from expgit.llm.port import ChatMessages, Completion, LLMError, ToolCall, ToolMessages, ToolTurn
from expgit.llm.provenance import display_url
from expgit.llm.retry import RetryPolicy, Transient

R = TypeVar("R")

_RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_SECONDS = 120.0  # a longer server-requested wait fails instead
MAX_BACKOFF_SECONDS = 20.0
# one call's whole time, retries and backoff included: a hung endpoint stops a call here
DEFAULT_DEADLINE_SECONDS = 120.0
_HINTS = {
    401: "check the API key: expgit reads it from the environment variable named by "
         "[llm] api_key_env (default OPENAI_API_KEY)",
    403: "the API key is not allowed to use this model or endpoint",
    404: "check the model name (--model / [llm] model) and the base URL "
         "(--base-url / OPENAI_BASE_URL / [llm] base_url; it usually ends in /v1)",
}
_FORMAT_HINT = ("if the endpoint does not support this response_format, set "
                '[llm] structured_output = "json_object" or "prompt" in expgit.toml')


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms``, ``retry-after`` as seconds
    or as an HTTP date), or None when it did not say."""
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        return max(seconds, 0.0) if math.isfinite(seconds) else math.inf
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        when = email.utils.parsedate_tz(value)
        return None if when is None else max(email.utils.mktime_tz(when) - time.time(), 0.0)
    except (TypeError, ValueError, OverflowError):
        return None


def _short(text: object, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def _error_code(exc: openai.APIStatusError) -> str | None:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("code"), str):
            return str(inner["code"])
    return None


class OpenAIChatModel:
    """Chat completions (and embeddings, with ``embeddings_model``) from an
    OpenAI-compatible endpoint, with our own bounded retries.

    ``max_retries`` is the number of retries after the first attempt. ``max_concurrency``
    bounds the requests in flight from this object (the local server runs one at a
    time; queueing here keeps its requests from timing out while they wait).
    """

    def __init__(self, *, base_url: str | None, api_key: str | None, model: str,
                 timeout_seconds: float = 60.0, max_retries: int = 4,
                 backoff_seconds: float = 0.5, embeddings_model: str | None = None,
                 max_concurrency: int | None = None, seed: int | None = None,
                 deadline_seconds: float | None = DEFAULT_DEADLINE_SECONDS) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.model = model
        self.embeddings_model = embeddings_model
        self.base_url = base_url
        self.seed = seed  # sent with every chat request when set (the embedded model's)
        self.max_retries = max_retries
        self.backoff_seconds = backoff_seconds
        self.retry_policy = RetryPolicy(max_retries, backoff_seconds, MAX_BACKOFF_SECONDS)
        self.attempts = 0  # HTTP attempts made, retries included
        self._limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self.client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_seconds,
            max_retries=0)
        self.timeout_seconds = timeout_seconds
        # one call's whole time, retries and waits included (None: unbounded)
        self.deadline_seconds = deadline_seconds

    @property
    def endpoint(self) -> str:
        """The base URL as messages show it: without its userinfo (a password)."""
        return display_url(str(self.client.base_url).rstrip("/"))

    def _status_failure(self, what: str, exc: openai.APIStatusError, attempt: int
                        ) -> LLMError | Transient:
        """The error to raise, or (a transient failure) the error to raise if no retry
        is left, with the wait the endpoint asked for."""
        status = exc.status_code
        headers = exc.response.headers if exc.response is not None else None
        detail = f"{what}: {self.endpoint} answered HTTP {status}: {_short(exc.message)}"
        code = _error_code(exc)
        should = (headers.get("x-should-retry") or "").lower() if headers else ""
        # llama.cpp's server answers a response_format it does not know with HTTP 500:
        # a refused request format is never transient, whatever the status says.
        refused_format = "response_format" in str(exc.message)
        retryable = (should == "true" or (status in _RETRYABLE_STATUS and should != "false")
                     ) and code != "insufficient_quota" and not refused_format
        if not retryable:
            hint = _HINTS.get(status)
            if code == "insufficient_quota":
                hint = "the account behind the API key has no quota left"
            elif refused_format:
                hint = _FORMAT_HINT
            return LLMError(detail, hint=hint, cause=f"HTTP {status}")
        wait = _retry_after(headers)
        if wait is not None and wait > MAX_RETRY_AFTER_SECONDS and attempt <= self.max_retries:
            return LLMError(f"{detail} (the endpoint asks to wait {wait:.0f}s, more than "
                            f"{MAX_RETRY_AFTER_SECONDS:.0f}s)",
                            cause=f"HTTP {status}, asked to wait {wait:.0f}s")
        return Transient(LLMError(f"{detail} (gave up after {attempt} attempts)",
                                  cause=f"HTTP {status}"), wait)

    def _past_deadline(self, what: str, attempt: int) -> LLMError:
        return LLMError(
            f"{what}: no answer from {self.endpoint} within the per-call deadline of "
            f"{self.deadline_seconds:g}s ({attempt} attempt{'s' if attempt != 1 else ''})",
            hint="check the endpoint, or raise [llm] call_deadline_seconds in expgit.toml",
            cause=f"no answer within the per-call deadline of {self.deadline_seconds:g}s")

    async def _with_retries(self, what: str, call: Callable[[float], Awaitable[R]]) -> R:
        """``call(timeout)`` with bounded retries, each attempt's timeout cut to what is
        left of the per-call deadline. The deadline starts once the call has its slot
        (``max_concurrency``): a wait in this process's own queue is not a hung endpoint."""
        async with self._limit or contextlib.nullcontext():
            return await self._attempts(what, call)

    async def _attempts(self, what: str, call: Callable[[float], Awaitable[R]]) -> R:
        deadline = (None if self.deadline_seconds is None
                    else time.monotonic() + self.deadline_seconds)

        async def attempt(n: int) -> R:
            timeout = self.timeout_seconds
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._past_deadline(what, n - 1)
                timeout = min(timeout, left)
            self.attempts += 1
            try:
                return await call(timeout)
            except openai.APIStatusError as exc:
                failure = self._status_failure(what, exc, n)
                raise failure from None
            except openai.APITimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise self._past_deadline(what, n) from None
                raise Transient(LLMError(
                    f"{what}: {self.endpoint} timed out ({self.timeout_seconds:g}s per "
                    f"request) {n} times", hint="raise [llm] timeout_seconds "
                    "in expgit.toml, or check that the endpoint is not overloaded",
                    cause=f"timed out ({self.timeout_seconds:g}s per request)")) from None
            except openai.APIConnectionError as exc:
                raise Transient(LLMError(f"{what}: {self.endpoint} could not be reached "
                                         f"after {n} attempts: {_short(exc.message)}",
                                         cause=f"{self.endpoint} unreachable")) from None
            except openai.OpenAIError as exc:  # malformed response body, client misuse
                raise LLMError(f"{what}: {self.endpoint} failed: {_short(exc)}",
                               cause=type(exc).__name__) from None
            except ValueError as exc:  # a body that claims to be JSON and is not
                raise LLMError(f"{what}: {self.endpoint} returned an unreadable response: "
                               f"{_short(exc)}", cause="unreadable response") from None

        return await self.retry_policy.call(
            attempt, deadline=deadline, past_deadline=lambda n: self._past_deadline(what, n))

    async def complete(self, messages: ChatMessages, *, stage: str,
                       response_format: dict[str, Any] | None, max_tokens: int,
                       temperature: float, seed: int | None = None) -> Completion:
        extra: dict[str, Any] = {"response_format": response_format} if response_format else {}
        if seed is not None or self.seed is not None:  # a call's own seed first
            extra["seed"] = seed if seed is not None else self.seed
        turn = await self._chat(messages, stage=stage, max_tokens=max_tokens,
                                temperature=temperature, **extra)
        return Completion(**turn.model_dump(exclude={"tool_calls"}))

    async def complete_tools(self, messages: ToolMessages, tools: list[dict[str, Any]], *,
                             stage: str, max_tokens: int, temperature: float,
                             seed: int | None = None) -> ToolTurn:
        """One assistant turn with ``tools=``; same retries and deadline as complete."""
        extra: dict[str, Any] = {"seed": seed} if seed is not None else {}
        return await self._chat(messages, stage=stage, tools=tools, max_tokens=max_tokens,
                                temperature=temperature, **extra)

    async def _chat(self, messages: ToolMessages, *, stage: str, **request: Any) -> ToolTurn:
        """One chat completion with bounded retries, read into a turn (tool calls only
        when ``tools`` were offered)."""

        async def call(timeout: float) -> Any:
            return await self.client.chat.completions.create(
                model=self.model, messages=messages,  # type: ignore[arg-type]
                timeout=timeout, **request)

        response = await self._with_retries(f"{stage} ({self.model})", call)
        try:
            choice = response.choices[0]
            usage = response.usage
            calls = [ToolCall(id=c.id, name=c.function.name,
                              arguments=c.function.arguments or "{}")
                     for c in (choice.message.tool_calls or [])] if "tools" in request else []
            return ToolTurn(
                text=choice.message.content or "", finish_reason=choice.finish_reason,
                tool_calls=calls, prompt_tokens=(usage.prompt_tokens or 0) if usage else 0,
                completion_tokens=(usage.completion_tokens or 0) if usage else 0,
                model=getattr(response, "model", None) or self.model)
        except (AttributeError, IndexError, TypeError, ValueError):
            raise LLMError(f"{stage}: {self.endpoint} returned a malformed chat completion: "
                           f"{_short(response)}", cause="malformed chat completion") from None

    async def embed(self, texts: list[str], *, stage: str) -> list[list[float]]:
        """One embedding per text, in order (one call; none for an empty list)."""
        if not self.embeddings_model:
            raise LLMError(f"{stage}: no embeddings model is configured",
                           hint="set [llm] embeddings_model in expgit.toml")
        if not texts:
            return []
        model = self.embeddings_model

        async def call(timeout: float) -> Any:
            return await self.client.embeddings.create(model=model, input=texts,
                                                       timeout=timeout)

        response = await self._with_retries(f"{stage} ({model})", call)
        try:
            items = sorted(response.data, key=lambda item: item.index)
            vectors = [[float(x) for x in item.embedding] for item in items]
        except (AttributeError, TypeError, ValueError):
            raise LLMError(f"{stage}: {self.endpoint} returned malformed embeddings") from None
        if len(vectors) != len(texts):
            raise LLMError(f"{stage}: {self.endpoint} returned {len(vectors)} embeddings "
                           f"for {len(texts)} texts")
        return vectors

    async def check_answers(self) -> None:
        """Whether the endpoint answers at all, before a run's first rollout: one request
        for its model list (no completion, no tokens), with the per-request timeout and
        no retries. Any HTTP answer will do (a proxy without ``/models`` answers 404),
        except a refused key; LLMError when nothing answers."""
        try:
            await self.client.models.list(timeout=min(self.timeout_seconds, 30.0))
        except openai.AuthenticationError as exc:
            raise LLMError(f"{self.endpoint} refused the API key: {_short(exc.message)}",
                           hint=_HINTS.get(401), cause="HTTP 401") from None
        except openai.APIStatusError:
            return  # it answered
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise LLMError(f"{self.endpoint} does not answer (checked before the first "
                           f"rollout): {_short(exc)}",
                           hint="start the endpoint, or check --base-url / [llm] base_url",
                           cause=f"{self.endpoint} unreachable") from None
        except (openai.OpenAIError, ValueError):
            return  # it answered, with something that is not a model list

    async def aclose(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
