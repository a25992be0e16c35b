"""Request guards every expgit HTTP service installs: bearer token, body size limit,
JSON bodies only, allowed Host names, client timeouts, and one-line JSON error bodies
(``{"error": "..."}``).

A web page must not be able to drive a service on this machine: a cross-site ``fetch``
or form can send a ``text/plain``, form or untyped body without a CORS preflight, and a
DNS rebinding page reaches ``127.0.0.1`` under its own host name. So every body must be
``application/json`` (anything else is ``415``), and :class:`HostGuard`, which
:mod:`expgit.asgi.server` puts in front of every app it serves, answers only the allowed
``Host`` names: loopback (``localhost``, ``127.0.0.1``, ``[::1]``, any port), the address
the server is bound to, and those named with ``--allow-host`` (others: ``400``, as
Starlette's TrustedHostMiddleware and Django's ALLOWED_HOSTS answer). Slow clients are
cut off by :func:`guarded_protocol` (uvicorn's h11 protocol with a deadline for the
request headers and one for the body, like nginx's ``client_header_timeout`` and
``client_body_timeout``).

``install_guards(app, token=..., max_body_bytes=...)``:

* every route except ``GET /health`` needs ``Authorization: Bearer <token>`` when a token
  is set; a missing or wrong token is ``401`` with ``WWW-Authenticate: Bearer``;
* a body over ``max_body_bytes`` (by ``Content-Length`` or as streamed) is ``413``;
* a body (or a ``Content-Type``) that is not ``application/json`` (or ``+json``) is
  ``415``, before any of it is read;
* malformed JSON and pydantic validation errors are ``422`` with a readable one-line
  message naming the field;
* :class:`~expgit.errors.ExpgitError` raised by a handler maps to a status:
  NotFoundError 404, ConflictError / LockHeldError 409, InvalidInputError 422,
  UsageError 400, anything else 500; unknown routes 404, wrong methods 405.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from expgit.errors import (
    ConflictError,
    ExpgitError,
    InvalidInputError,
    LockHeldError,
    NotFoundError,
    UsageError,
)

OPEN_ROUTES = frozenset({("GET", "/health"), ("HEAD", "/health")})
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "[::]", "*"})
_MESSAGE_CHARS = 500


@dataclass(frozen=True)
class ClientTimeouts:
    """How long a client may take to send a request's headers (from the connection or
    its first byte after a response) and then its body; the connection is closed after."""

    header_seconds: float = 10.0
    body_seconds: float = 30.0


CLIENT_TIMEOUTS = ClientTimeouts()


def error_response(
    status: int, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The one error shape: ``{"error": message}`` (one line, bounded)."""
    line = " ".join(message.split())[:_MESSAGE_CHARS] or f"HTTP {status}"
    return JSONResponse({"error": line}, status_code=status, headers=headers)


def status_for(error: ExpgitError) -> int:
    """HTTP status of an ExpgitError (subclass order matters: NotFound is an InvalidInput)."""
    if isinstance(error, NotFoundError):
        return 404
    if isinstance(error, ConflictError | LockHeldError):
        return 409
    if isinstance(error, InvalidInputError):
        return 422
    if isinstance(error, UsageError):
        return 400
    return 500


def describe_validation_errors(errors: Sequence[Any]) -> str:
    """``body.case.name: Field required; ...`` — one line naming each bad field."""
    parts: list[str] = []
    for item in errors[:5]:
        if not isinstance(item, dict):
            parts.append(str(item))
            continue
        if item.get("type") == "json_invalid":
            ctx = item.get("ctx") or {}
            parts.append(f"malformed JSON body: {ctx.get('error', 'cannot parse')}")
            continue
        where = ".".join(str(p) for p in item.get("loc", ()))
        parts.append(f"{where}: {item.get('msg', 'invalid')}" if where else str(item.get("msg")))
    more = f"; ... ({len(errors) - 5} more)" if len(errors) > 5 else ""
    return "invalid request: " + "; ".join(parts) + more


class _GuardMiddleware:
    """Pure ASGI middleware: token check first, then the body is read (bounded) and
    replayed to the app, so a handler never sees more than ``max_body_bytes``."""

    def __init__(self, app: ASGIApp, *, token: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.token = token
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = str(scope.get("method", "GET")).upper()
        path = str(scope.get("path", ""))
        headers = Headers(scope=scope)
        needs_token = self.token is not None and (method, path) not in OPEN_ROUTES
        if needs_token and not self._authorized(headers):
            response = error_response(
                401,
                "missing or wrong bearer token",
                headers={"WWW-Authenticate": 'Bearer realm="expgit"'},
            )
            await response(scope, receive, send)
            return
        refused_type = _not_json(headers)
        if refused_type is not None:
            response = error_response(
                415, f"unsupported content type {refused_type!r}: send the body as "
                "application/json (Content-Type: application/json)")
            await response(scope, receive, send)
            return
        declared = _content_length(headers)
        if declared is not None and declared > self.max_body_bytes:
            await self._too_large(scope, receive, send)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.extend(message.get("body", b""))
            more = bool(message.get("more_body", False))
            if len(body) > self.max_body_bytes:
                await self._too_large(scope, receive, send)
                return
        await self.app(scope, _replay(bytes(body), receive), send)

    def _authorized(self, headers: Headers) -> bool:
        assert self.token is not None
        scheme, _, presented = headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            presented.strip().encode(), self.token.encode())

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            413, f"request body over the limit of {self.max_body_bytes} bytes"
        )
        await response(scope, receive, send)


def _content_length(headers: Headers) -> int | None:
    value = headers.get("content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _not_json(headers: Headers) -> str | None:
    """The media type of a request whose body is not JSON (``""``: a body with no
    type), None when it is JSON or the request has neither body nor type."""
    declared = headers.get("content-type")
    has_body = bool(_content_length(headers)) or "transfer-encoding" in headers
    if declared is None:
        return "" if has_body else None
    media = declared.split(";", 1)[0].strip().lower()
    kind, _, subtype = media.partition("/")
    if kind == "application" and (subtype == "json" or subtype.endswith("+json")):
        return None
    return media[:80]


def host_name(value: str) -> str:
    """``Host`` header or host name as compared: lower case, without the port or a
    trailing dot, an IPv6 address in brackets (``::1`` and ``[::1]:80`` -> ``[::1]``)."""
    value = value.strip().lower()
    if value.startswith("["):
        value = value[:value.find("]") + 1] if "]" in value else value
    elif value.count(":") == 1:
        value = value.partition(":")[0]
    elif ":" in value:  # a bare IPv6 address
        value = f"[{value}]"
    return value.rstrip(".")


def allowed_hosts(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """Loopback names, the address bound to (unless every interface), and ``extra``."""
    names = {host_name(name) for name in (bind, *extra)} - _WILDCARD_BINDS
    return LOOPBACK_HOSTS | names


class HostGuard:
    """Pure ASGI middleware: an HTTP request whose ``Host`` is not in ``allowed`` is
    ``400`` (a DNS rebinding page's host name never is); lifespan passes through."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(host_name(name) for name in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = host_name(Headers(scope=scope).get("host", ""))
            if host not in self.allowed:
                shown = "".join(c for c in host if c.isprintable())[:100] or "(none)"
                response = error_response(
                    400, f"host {shown!r} is not allowed: this service answers "
                    f"{', '.join(sorted(self.allowed))}",
                    headers={"Connection": "close"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _DeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers take longer
    than ``timeouts.header_seconds`` (counted from the connection, or from the first byte
    of a next request) or whose body then takes longer than ``timeouts.body_seconds``.
    uvicorn itself only times out an idle keep-alive connection."""

    timeouts: ClassVar[ClientTimeouts] = CLIENT_TIMEOUTS
    _deadline: asyncio.TimerHandle | None = None
    _phase: type[h11.IDLE] | type[h11.SEND_BODY] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _watch(self) -> None:
        state = self.conn.their_state
        phase = h11.IDLE if state is h11.IDLE else h11.SEND_BODY \
            if state is h11.SEND_BODY else None
        if phase is self._phase:
            return
        self._disarm()
        self._phase = phase
        if phase is not None:
            seconds = (self.timeouts.header_seconds if phase is h11.IDLE
                       else self.timeouts.body_seconds)
            self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def guarded_protocol(timeouts: ClientTimeouts) -> type[H11Protocol]:
    """The h11 protocol class for uvicorn's ``Config(http=...)`` with ``timeouts``."""
    return type("GuardedH11Protocol", (_DeadlineProtocol,), {"timeouts": timeouts})


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _on_expgit_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ExpgitError)
    message = exc.message + (f" (hint: {exc.hint})" if exc.hint else "")
    return error_response(status_for(exc), message)


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(422, describe_validation_errors(list(exc.errors())))


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"not found: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        detail = f"method {request.method} not allowed on {request.url.path}"
    return error_response(exc.status_code, detail, headers=dict(exc.headers or {}))


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


def install_guards(app: FastAPI, *, token: str | None, max_body_bytes: int) -> None:
    """Install the auth / size-limit middleware and the error handlers on ``app``.

    ``token=None`` (or empty) means no authentication. Call once, before serving."""
    if max_body_bytes <= 0:
        raise UsageError(f"max_body_bytes must be positive, got {max_body_bytes}")
    app.add_middleware(_GuardMiddleware, token=token or None, max_body_bytes=max_body_bytes)
    app.add_exception_handler(ExpgitError, _on_expgit_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)
