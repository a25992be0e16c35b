"""Request guards every expgit HTTP service installs: bearer token, body size limit and
one-line JSON error bodies (``{"error": "..."}``, :class:`expgit.remote.protocol.ErrorBody`).

``install_guards(app, token=..., max_body_bytes=...)``:

* every route except ``GET /health`` needs ``Authorization: Bearer <token>`` when a token
  is set; a missing or wrong token is ``401`` with ``WWW-Authenticate: Bearer``;
* a body over ``max_body_bytes`` (by ``Content-Length`` or as streamed) is ``413``;
* malformed JSON and pydantic validation errors are ``422`` with a readable one-line
  message naming the field;
* :class:`~expgit.errors.ExpgitError` raised by a handler maps to a status:
  NotFoundError 404, ConflictError / LockHeldError 409, InvalidInputError 422,
  UsageError 400, anything else 500; unknown routes 404, wrong methods 405.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from expgit.errors import (
    ConflictError,
    ExpgitError,
    InvalidInputError,
    LockHeldError,
    NotFoundError,
    UsageError,
)

OPEN_ROUTES = frozenset({("GET", "/health"), ("HEAD", "/health")})
_MESSAGE_CHARS = 500


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
        needs_token = self.token is not None and (method, path) not in OPEN_ROUTES
        if needs_token and not self._authorized(scope):
            response = error_response(
                401,
                "missing or wrong bearer token",
                headers={"WWW-Authenticate": 'Bearer realm="expgit"'},
            )
            await response(scope, receive, send)
            return
        declared = _content_length(scope)
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

    def _authorized(self, scope: Scope) -> bool:
        assert self.token is not None
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                scheme, _, presented = value.decode("latin-1").partition(" ")
                if scheme.lower() != "bearer":
                    return False
                return hmac.compare_digest(presented.strip().encode(), self.token.encode())
        return False

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            413, f"request body over the limit of {self.max_body_bytes} bytes"
        )
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


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
