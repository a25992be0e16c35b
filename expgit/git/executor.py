"""Git work from async code, on a small pool of threads of its own.

Git calls are synchronous (file and pipe I/O, zlib, hashing): async code runs them in a
thread so the event loop never blocks. Through :func:`asyncio.to_thread` they share the
loop's default pool with any other blocking work and run many at a time, each handing the
GIL to the others at every system call: a git call of a tenth of a millisecond then waits
milliseconds for its turn. A :class:`GitExecutor` (one thread by default) runs them one
after the other instead, beside the event loop.

Which executor runs :func:`run_git` is a context variable: a component calls
``await run_git(func, ...)`` and whoever drives it (the streaming trainer) makes an
executor current with :meth:`GitExecutor.current`; without one, :func:`run_git` is
:func:`asyncio.to_thread`. Only git work goes there: nothing that waits for something
else (a lock held by another process, a network reply) may, since it would hold up every
git call behind it.

A call that has proved quick runs on the event loop itself. Handing a git call of a
millisecond to a thread costs more than the call: after each of its system calls the
thread must win the GIL back from the loop, which is running Python meanwhile (ranking,
rendering, parsing replies), and waits up to the interpreter's switch interval (5 ms)
for it. An executor therefore times the calls of each function (each code object, so a
lambda written once is one function) and runs a call on the loop when that function's
recent average is under ``inline_below`` seconds (after :data:`LEARNING_CALLS` calls
timed on its threads); the loop is then blocked for about that long, as for any short
synchronous step. A function that turns slow (a large snapshot to load, a lock to wait
for) goes back to the threads with the next call.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

__all__ = ["INLINE_BELOW", "GitExecutor", "current_executor", "run_git"]

INLINE_BELOW = 0.005  # seconds: functions whose calls average less run on the loop
LEARNING_CALLS = 3  # calls of a function timed on the threads before it may run inline
_WEIGHT = 0.25  # of the newest call in a function's moving average

P = ParamSpec("P")
T = TypeVar("T")

_CURRENT: contextvars.ContextVar[GitExecutor | None] = contextvars.ContextVar(
    "expgit_git_executor", default=None)


class GitExecutor:
    """A pool of ``threads`` threads (created on first use) that runs git calls for async
    code, and runs on the loop itself the calls of functions that averaged under
    ``inline_below`` seconds (see the module); :meth:`close` ends the threads once the
    calls queued before it are done. Thread safe; usable from several event loops."""

    def __init__(self, threads: int = 1, *, name: str = "expgit-git",
                 inline_below: float = INLINE_BELOW) -> None:
        if threads < 1:
            raise ValueError(f"a git executor needs at least one thread, not {threads}")
        self.threads = threads
        self.inline_below = inline_below  # 0: every call on the threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
        self._closed = False
        self._lock = threading.Lock()
        self._timings: dict[object, tuple[int, float]] = {}  # function: (calls, average)

    @property
    def closed(self) -> bool:
        return self._closed

    async def run(self, func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``func(*args, **kwargs)`` in a copy of the caller's context (as
        :func:`asyncio.to_thread` does): on the loop when ``func`` has proved quick, else
        on one of the executor's threads; after :meth:`close`, on the loop's default
        pool."""
        site = _site(func)
        call = functools.partial(contextvars.copy_context().run, func, *args, **kwargs)
        if site is not None and self._quick(site):
            return self._timed(site, call)
        loop = asyncio.get_running_loop()
        timed = functools.partial(self._timed, site, call)
        with self._lock:
            if not self._closed:
                future = loop.run_in_executor(self._pool, timed)
            else:
                future = loop.run_in_executor(None, timed)
        return await future

    def _quick(self, site: object) -> bool:
        calls, average = self._timings.get(site, (0, 0.0))
        return calls >= LEARNING_CALLS and average < self.inline_below and not self._closed

    def _timed(self, site: object | None, call: Callable[[], T]) -> T:
        """``call()``, its duration added to ``site``'s average."""
        if site is None:
            return call()
        started = time.perf_counter()
        try:
            return call()
        finally:
            took = time.perf_counter() - started
            with self._lock:
                calls, average = self._timings.get(site, (0, took))
                self._timings[site] = (calls + 1, average + _WEIGHT * (took - average))

    @contextmanager
    def current(self) -> Iterator[GitExecutor]:
        """Within the block (in this task, and in the tasks it creates), :func:`run_git`
        runs on this executor."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def close(self) -> None:
        """Stop taking calls (later ones run on the default pool) and let the threads end
        when the queued calls are done; does not wait for them."""
        with self._lock:
            self._closed = True
            self._pool.shutdown(wait=False)


def _site(func: Callable[..., Any]) -> object | None:
    """What identifies ``func``'s kind of call: its code object (through partials and
    bound methods); None for a callable without one (a builtin), never run inline."""
    while isinstance(func, functools.partial):
        func = func.func
    func = getattr(func, "__func__", func)
    return getattr(func, "__code__", None)


def current_executor() -> GitExecutor | None:
    """The executor :func:`run_git` uses here, None: :func:`asyncio.to_thread`."""
    return _CURRENT.get()


async def run_git(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run the git work ``func(*args, **kwargs)`` off the event loop: on the current
    :class:`GitExecutor`, else as :func:`asyncio.to_thread` does."""
    executor = _CURRENT.get()
    if executor is None:
        return await asyncio.to_thread(func, *args, **kwargs)
    return await executor.run(func, *args, **kwargs)
