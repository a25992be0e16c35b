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
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

__all__ = ["GitExecutor", "current_executor", "run_git"]

P = ParamSpec("P")
T = TypeVar("T")

_CURRENT: contextvars.ContextVar[GitExecutor | None] = contextvars.ContextVar(
    "expgit_git_executor", default=None)


class GitExecutor:
    """A pool of ``threads`` threads (created on first use) that runs git calls for async
    code; :meth:`close` ends them once the calls queued before it are done. Thread safe;
    usable from several event loops."""

    def __init__(self, threads: int = 1, *, name: str = "expgit-git") -> None:
        if threads < 1:
            raise ValueError(f"a git executor needs at least one thread, not {threads}")
        self.threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closed

    async def run(self, func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``func(*args, **kwargs)`` on one of the executor's threads (in a copy of the
        caller's context, as :func:`asyncio.to_thread` does); after :meth:`close`, on the
        loop's default pool."""
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, func, *args, **kwargs)
        with self._lock:
            if not self._closed:
                future = loop.run_in_executor(self._pool, call)
            else:
                future = loop.run_in_executor(None, call)
        return await future

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
