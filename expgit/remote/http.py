"""The HTTP seam of the remote clients: an ``httpx.AsyncClient`` factory, one JSON call
that turns every failure into a readable :class:`RemoteServiceError`, round-trip
accounting, and the ``GET /health`` preflight.

``transport`` is the test seam: ``None`` means real sockets; tests may pass an
``httpx.MockTransport`` (or use a real server started with ``start_server``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from expgit.errors import ExpgitError, UsageError
from expgit.remote.protocol import Health

Model = TypeVar("Model", bound=BaseModel)

DEFAULT_REQUEST_TIMEOUT = 30.0
_TEXT_CHARS = 300


class RemoteServiceError(ExpgitError):
    """A remote service could not be reached or refused / garbled a request.

    ``status`` is the HTTP status (None: no answer at all); ``reachable`` False means the
    request may not have arrived (connection refused, reset, timeout)."""

    def __init__(self, message: str, *, status: int | None = None, reachable: bool = True,
                 sent: bool = True, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.reachable = reachable
        self.sent = sent


@dataclass
class HttpStats:
    """HTTP round trips and their wall time (ms), accumulated by :func:`call_json`."""

    round_trips: int = 0
    http_ms: float = 0.0


def make_client(url: str, *, token: str | None = None,
                transport: httpx.AsyncBaseTransport | None = None,
                timeout: float = DEFAULT_REQUEST_TIMEOUT,
                max_connections: int = 16) -> httpx.AsyncClient:
    """An AsyncClient on ``url`` with the bearer token (if any), a per-request timeout
    and a connection pool of ``max_connections``. The caller closes it (``async with``)."""
    if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
        raise UsageError(f"not a service URL: {url!r}", hint="use http://HOST:PORT")
    headers = {"Accept": "application/json", "User-Agent": "expgit-remote"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    limits = httpx.Limits(max_connections=max_connections,
                          max_keepalive_connections=max_connections)
    return httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, transport=transport,
                             timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
                             limits=limits, trust_env=False)


def _service_error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    text = " ".join(response.text.split())[:_TEXT_CHARS]
    return text or response.reason_phrase or "no error text"


async def call_json(client: httpx.AsyncClient, method: str, path: str, model: type[Model], *,
                    body: BaseModel | None = None, stats: HttpStats | None = None) -> Model:
    """One request; the 2xx JSON answer validated as ``model``.

    Raises RemoteServiceError: no answer (``status`` None, ``sent`` False if the
    connection was never made), a non-2xx answer (with the service's ``error`` text), or
    an answer that is not the expected JSON."""
    where = f"{method} {client.base_url}{path}"
    content = body.model_dump_json().encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if content is not None else None
    started = time.perf_counter()
    try:
        response = await client.request(method, path, content=content, headers=headers)
    except httpx.TransportError as exc:
        sent = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
        kind = type(exc).__name__
        raise RemoteServiceError(f"{where}: no answer ({kind}: {exc or 'no detail'})",
                                 reachable=False, sent=sent) from None
    finally:
        if stats is not None:
            stats.round_trips += 1
            stats.http_ms += (time.perf_counter() - started) * 1000
    if not response.is_success:
        raise RemoteServiceError(
            f"{where}: HTTP {response.status_code}: {_service_error_text(response)}",
            status=response.status_code)
    try:
        data: Any = response.json()
    except ValueError:
        raise RemoteServiceError(
            f"{where}: answered something that is not JSON: "
            f"{' '.join(response.text.split())[:_TEXT_CHARS]!r}",
            status=response.status_code) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise RemoteServiceError(
            f"{where}: answered JSON that is not a {model.__name__} "
            f"({exc.error_count()} problems; {loc}: {first['msg']})",
            status=response.status_code) from None


async def preflight(url: str, token: str | None = None,
                    transport: httpx.AsyncBaseTransport | None = None, *,
                    timeout: float = 10.0) -> Health:
    """``GET /health``: the service's Health, or a RemoteServiceError saying it is down,
    refuses us or answers garbage (the service URL and what was wrong in one line)."""
    async with make_client(url, token=token, transport=transport, timeout=timeout) as client:
        try:
            return await call_json(client, "GET", "/health", Health)
        except RemoteServiceError as exc:
            hint = ("is the service running? start it, or check --env-url"
                    if not exc.reachable else "is this URL an expgit environment service?")
            raise RemoteServiceError(f"service health check failed: {exc.message}",
                                     status=exc.status, reachable=exc.reachable,
                                     hint=hint) from None
