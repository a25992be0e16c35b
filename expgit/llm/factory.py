"""Choosing and opening the LLM: an OpenAI-compatible endpoint or the embedded model.

:func:`resolve_llm` decides from ``[llm]`` settings, the environment and command-line
overrides; :func:`open_llm` returns an :class:`LLMRuntime`, an async context manager that
starts what is needed (the local server), exposes ``structured``, ``chat``,
``embeddings``, ``meter`` and ``description`` inside, and stops everything on exit::

    async with open_llm(settings.llm, choice=None, model=None, base_url=None,
                        meter=None) as llm:
        answer = await llm.structured.generate("judge", system, user, Verdict)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from expgit.errors import UsageError
from expgit.llm.local import (
    DEFAULT_N_CTX,
    LocalModelServer,
    check_server_installed,
    find_gguf,
    model_name,
)
from expgit.llm.openai_chat import OpenAIChatModel
from expgit.llm.port import ChatModel, EmbeddingModel, UsageMeter
from expgit.llm.provenance import (
    DEFAULT_HOST,
    EMBEDDED,
    LOCAL_DESCRIPTION_PREFIX,
    display_url,
    endpoint_host,
    gguf_sha256,
)
from expgit.llm.structured import Mode, StructuredLLM
from expgit.store.format.provenance import Provenance
from expgit.store.format.settings import LLMSettings, Price

Choice = Literal["local", "openai"]
LOCAL_MIN_TIMEOUT_SECONDS = 300.0  # requests are queued client-side; generation is slow
# The embedded model's context and reply cap. The training stages' replies are bounded by
# their schemas (enforced as a grammar) to fit the cap even at one token per character;
# [llm] max_tokens configures an endpoint, not the embedded model.
LOCAL_N_CTX = DEFAULT_N_CTX  # 8192: SmolLM2's context
LOCAL_MAX_TOKENS = 2048
LOCAL_PROMPT_MARGIN = 256  # tokens kept free: chat template, estimate error
# The embedded model samples greedily (temperature 0) with a fixed seed, per request and
# for the server: the same snapshot gives the same replies, so the same score, each run.
LOCAL_SEED = 0
# how the embedded model's runtime describes itself (a run report's ``llm``)


@dataclass(frozen=True)
class ResolvedLLM:
    """Where the calls go: ``base_url`` None with ``openai`` means api.openai.com."""

    choice: Choice
    model: str
    base_url: str | None
    api_key: str | None
    mode: Mode
    gguf: Path | None = None  # local only


def resolve_llm(settings: LLMSettings, *, choice: Choice | None, model: str | None,
                base_url: str | None, environ: Mapping[str, str] | None = None
                ) -> ResolvedLLM:
    """Flags win over the environment (``OPENAI_BASE_URL``, the key variable named by
    ``api_key_env``), which wins over ``expgit.toml``. With no choice: ``openai`` when a
    base URL or an API key is configured, else the embedded ``local`` model."""
    env = os.environ if environ is None else environ
    api_key = env.get(settings.api_key_env) or None
    if choice == "local":
        if base_url:
            raise UsageError("--base-url cannot be used with --llm local",
                             hint="drop --base-url, or use --llm openai")
        gguf = _local_model(model)
        check_server_installed()
        return ResolvedLLM("local", model_name(gguf), None, None, "json_object", gguf)
    endpoint = base_url or env.get("OPENAI_BASE_URL") or settings.base_url or None
    if choice is None and endpoint is None and api_key is None:
        return resolve_llm(settings, choice="local", model=model, base_url=None,
                           environ=env)
    if endpoint is None and api_key is None:
        raise UsageError(
            "--llm openai needs an endpoint, and none is configured",
            hint=f"set {settings.api_key_env} for api.openai.com, or OPENAI_BASE_URL / "
                 "--base-url / [llm] base_url for another OpenAI-compatible server")
    return ResolvedLLM("openai", model or settings.model, endpoint, api_key,
                       settings.structured_output)


def _local_model(model: str | None) -> Path:
    if not model:
        return find_gguf()
    path = Path(model).expanduser()
    if path.suffix != ".gguf" or not path.is_file():
        raise UsageError(f"--model {model!r}: with --llm local, --model must be the path of "
                         "a .gguf file", hint="omit --model to use the bundled SmolLM2-135M")
    return path


class LLMRuntime:
    """The opened LLM: ``structured``, ``chat``, ``embeddings`` (None when not
    configured), ``meter`` and a one-line ``description``; valid inside ``async with``.

    ``is_local`` and ``prompt_tokens`` (the prompt size that fits the embedded model's
    context with its reply; None for an endpoint) are known before opening."""

    def __init__(self, settings: LLMSettings, resolved: ResolvedLLM, meter: UsageMeter,
                 *, preflight: bool = False) -> None:
        self.preflight = preflight  # opening checks that the endpoint answers
        self.settings = settings
        self.resolved = resolved
        self.meter = meter
        self._server: LocalModelServer | None = None
        self._client: OpenAIChatModel | None = None
        self._chat: ChatModel | None = None
        self._structured: StructuredLLM | None = None
        self._embeddings: EmbeddingModel | None = None
        self._in_process = False
        where = display_url(resolved.base_url or DEFAULT_HOST)
        self.description = (f"{LOCAL_DESCRIPTION_PREFIX}{resolved.model} (not started)"
                             if resolved.choice == "local" else f"{resolved.model} at {where}")

    @classmethod
    def fixed(cls, chat: ChatModel, *, meter: UsageMeter | None = None,
              mode: Mode = "json_schema", embeddings: EmbeddingModel | None = None,
              settings: LLMSettings | None = None, description: str | None = None
              ) -> LLMRuntime:
        """A runtime around a given model (tests, benchmarks: ScriptedChatModel)."""
        settings = settings or LLMSettings()
        runtime = cls(settings, ResolvedLLM("openai", chat.model, None, None, mode),
                      meter or UsageMeter(dict(settings.prices)))
        runtime._wire(chat, embeddings)
        runtime._in_process = True
        runtime.description = description or f"{chat.model} (in-process)"
        return runtime

    @property
    def is_local(self) -> bool:
        return self.resolved.choice == "local"

    @property
    def max_tokens(self) -> int:
        """The reply cap: ``[llm] max_tokens``; LOCAL_MAX_TOKENS for the embedded model."""
        return LOCAL_MAX_TOKENS if self.is_local else self.settings.max_tokens

    @property
    def prompt_tokens(self) -> int | None:
        if not self.is_local:
            return None
        return LOCAL_N_CTX - self.max_tokens - LOCAL_PROMPT_MARGIN

    def _wire(self, chat: ChatModel, embeddings: EmbeddingModel | None) -> None:
        self._chat = chat
        self._embeddings = embeddings
        # the embedded server enforces the schema as a grammar: the prompt need not (and,
        # for a small model, should not) show it
        self._structured = StructuredLLM(
            chat, self.meter, mode=self.resolved.mode, max_tokens=self.max_tokens,
            temperature=0.0 if self.is_local else self.settings.temperature,
            schema_in_prompt=not self.is_local, grammar_bounds=self.is_local)

    def _require(self) -> tuple[ChatModel, StructuredLLM]:
        if self._chat is None or self._structured is None:
            raise RuntimeError("the LLM runtime is not open: use `async with open_llm(...)`")
        return self._chat, self._structured

    @property
    def chat(self) -> ChatModel:
        return self._require()[0]

    @property
    def structured(self) -> StructuredLLM:
        return self._require()[1]

    @property
    def embeddings(self) -> EmbeddingModel | None:
        self._require()
        return self._embeddings

    def provenance(self, agent_model: str | None = None) -> Provenance:
        """The trainer model (this runtime's), its endpoint's host, the embedded model's
        file hash (computed once, cached); ``agent_model`` None: this runtime runs the
        agent too."""
        resolved = self.resolved
        if self._in_process:
            endpoint = "in-process"
        elif resolved.choice == "local":
            endpoint = EMBEDDED
        else:
            endpoint = endpoint_host(resolved.base_url)
        sha = gguf_sha256(resolved.gguf) if resolved.gguf is not None else None
        return Provenance(agent_model=agent_model or resolved.model,
                          trainer_model=resolved.model, endpoint=endpoint, model_sha256=sha)

    async def __aenter__(self) -> LLMRuntime:
        if self._chat is not None:
            return self
        settings, resolved = self.settings, self.resolved
        if resolved.choice == "local":
            server = LocalModelServer(resolved.gguf, n_ctx=LOCAL_N_CTX, seed=LOCAL_SEED)
            await server.__aenter__()
            try:  # one request at a time: the server serialises them anyway
                client = OpenAIChatModel(
                    base_url=server.base_url, api_key=None, model=resolved.model,
                    timeout_seconds=max(settings.timeout_seconds, LOCAL_MIN_TIMEOUT_SECONDS),
                    max_retries=settings.max_retries, max_concurrency=1, seed=LOCAL_SEED,
                    # the embedded model on 2 cores: a long reply is slow, not hung
                    deadline_seconds=max(settings.call_deadline_seconds,
                                         LOCAL_MIN_TIMEOUT_SECONDS * 2))
            except BaseException:
                await server.__aexit__(None, None, None)
                raise
            self._server = server
            self.description = f"{LOCAL_DESCRIPTION_PREFIX}{resolved.model} at {server.base_url}"
        else:
            client = OpenAIChatModel(
                base_url=resolved.base_url, api_key=resolved.api_key, model=resolved.model,
                timeout_seconds=settings.timeout_seconds, max_retries=settings.max_retries,
                embeddings_model=settings.embeddings_model,
                deadline_seconds=settings.call_deadline_seconds)
            self.description = f"{resolved.model} at {client.endpoint}"
            if self.preflight:
                try:
                    await client.check_answers()
                except BaseException:
                    await client.aclose()
                    raise
        self._client = client
        self._wire(client, client if client.embeddings_model else None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        client, server = self._client, self._server
        self._client = self._server = None
        self._chat = self._structured = self._embeddings = None
        try:
            if client is not None:
                await client.aclose()
        finally:
            if server is not None:
                await server.__aexit__(None, None, None)


def open_llm(settings: LLMSettings, *, choice: Choice | None, model: str | None,
             base_url: str | None, meter: UsageMeter | None,
             environ: Mapping[str, str] | None = None,
             preflight: bool = False) -> LLMRuntime:
    """Resolve the LLM (raising UsageError at once when it cannot work) and return the
    runtime to open with ``async with``. The meter gets the ``[llm] prices`` table.
    ``preflight``: opening checks that an endpoint answers (no completion is asked: a
    request for its model list), so a dead one stops a run before its first rollout."""
    resolved = resolve_llm(settings, choice=choice, model=model, base_url=base_url,
                           environ=environ)
    prices = dict(settings.prices)
    if resolved.choice == "local":
        prices.pop("*", None)  # a catch-all API price does not apply to the local model
        # it runs on this machine: its calls cost no money (known, not unknown)
        prices.setdefault(resolved.model, Price())
    if meter is None:
        meter = UsageMeter(prices)
    else:
        for name, price in prices.items():
            meter.prices.setdefault(name, price)
    return LLMRuntime(settings, resolved, meter, preflight=preflight)
