"""Run an ASGI app with uvicorn on a real socket.

* :func:`start_server` — in a background thread (tests, embedding): binds first (port 0 =
  a free port, read back from the bound socket), returns once the server accepts
  connections; :meth:`RunningServer.stop` shuts it down (also a context manager).
* :func:`serve_forever` — in the calling (main) thread for CLIs: ``on_ready(url)`` once
  listening, a clean return on SIGINT / SIGTERM.

Both put :class:`~expgit.asgi.guards.HostGuard` in front of the app (loopback names, the
bound address and ``allow_hosts``) and cut off clients slower than ``timeouts``
(:func:`~expgit.asgi.guards.guarded_protocol`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterable
from types import FrameType, TracebackType

import uvicorn
from starlette.types import ASGIApp

from expgit.asgi.guards import (
    CLIENT_TIMEOUTS,
    ClientTimeouts,
    HostGuard,
    allowed_hosts,
    guarded_protocol,
)
from expgit.errors import ExpgitError, UsageError

_STARTUP_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0


class _QuietServer(uvicorn.Server):
    """uvicorn.Server whose signal handling is left to the caller (uvicorn re-raises a
    captured signal after shutdown, which would turn a clean stop into an exit code)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    # protocol is TCP (with proto 0 Nagle delays every response body by ~40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="choose another --port or stop the process using it",
        ) from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _url(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _config(app: ASGIApp, host: str = "127.0.0.1", allow_hosts: Iterable[str] = (),
            timeouts: ClientTimeouts = CLIENT_TIMEOUTS) -> uvicorn.Config:
    return uvicorn.Config(
        HostGuard(app, allowed_hosts(host, allow_hosts)),
        http=guarded_protocol(timeouts),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
        # its log lines' level names are coloured on a terminal, unless NO_COLOR is set
        use_colors=False if os.environ.get("NO_COLOR") else None,
    )


class RunningServer:
    """A uvicorn server running in a daemon thread; ``url`` is ``http://host:port``."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, url: str) -> None:
        self._server = server
        self._thread = thread
        self.url = url

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        """Stop accepting, finish (briefly) what is in flight, join the thread. Idempotent."""
        self._server.should_exit = True
        self._thread.join(_STOP_TIMEOUT)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(_STOP_TIMEOUT)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_server(app: ASGIApp, *, host: str = "127.0.0.1", port: int = 0,
                 allow_hosts: Iterable[str] = (),
                 timeouts: ClientTimeouts = CLIENT_TIMEOUTS) -> RunningServer:
    """Serve ``app`` on ``host:port`` in a background thread; returns once it accepts."""
    sock = _bind(host, port)
    url = _url(sock, host)
    server = _QuietServer(_config(app, host, allow_hosts, timeouts))
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # reported to the starting thread
            failure.append(exc)
        finally:
            sock.close()

    thread = threading.Thread(target=run, name=f"uvicorn {url}", daemon=True)
    thread.start()
    deadline = time.monotonic() + _STARTUP_TIMEOUT
    while not server.started:
        if failure or not thread.is_alive():
            detail = f": {failure[0]}" if failure else ""
            raise ExpgitError(f"the server on {url} failed to start{detail}")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise ExpgitError(f"the server on {url} did not start within {_STARTUP_TIMEOUT}s")
        time.sleep(0.01)
    return RunningServer(server, thread, url)


def serve_forever(
    app: ASGIApp,
    *,
    host: str,
    port: int,
    on_ready: Callable[[str], None] | None = None,
    allow_hosts: Iterable[str] = (),
    timeouts: ClientTimeouts = CLIENT_TIMEOUTS,
) -> None:
    """Serve ``app`` until SIGINT / SIGTERM, then shut down cleanly and return.

    ``on_ready(url)`` is called once the socket accepts connections (print the URL there).
    Must be called from the main thread (signal handlers)."""
    sock = _bind(host, port)
    url = _url(sock, host)
    server = _QuietServer(_config(app, host, allow_hosts, timeouts))

    def request_exit(signum: int, frame: FrameType | None) -> None:
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True

    async def main() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started and on_ready is not None:
            on_ready(url)
        await task

    previous = {sig: signal.signal(sig, request_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        asyncio.run(main())
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    if not server.started:
        raise ExpgitError(f"the server on {url} failed to start")
