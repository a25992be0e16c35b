"""The one retry policy (docs/design.md, "Safety") of calls to something that may fail
for a while: an LLM endpoint, the training and environment services, a local model
server's port. It is tenacity's loop: an attempt that raises :class:`Transient` is tried
again, at most ``retries`` more times, after exponential backoff or the wait the server
asked for, never waiting past the deadline; giving up raises the last Transient's
``error``, which the caller built knowing the attempt's number. Polling a job and waiting
for a lock's holder are not retries (they wait for another party, bounded by time)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_never,
    wait_exponential,
    wait_random_exponential,
)

R = TypeVar("R")

__all__ = ["RetryPolicy", "Transient"]


class Transient(Exception):
    """Raised by an attempt that may succeed if tried again; ``error``: what the call
    raises if it is not tried again; ``wait``: seconds the server asked to wait (None:
    the policy's backoff)."""

    def __init__(self, error: BaseException, wait: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.wait = wait


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` after the first attempt (None: unbounded), backoff from ``first`` to
    ``most`` seconds, with or without ``jitter`` (see the module's docstring)."""

    retries: int | None
    first: float
    most: float
    jitter: bool = True

    async def call(self, attempt: Callable[[int], Awaitable[R]], *,
                   deadline: float | None = None,
                   past_deadline: Callable[[int], BaseException] | None = None) -> R:
        """``await attempt(n)`` for n = 1, 2, ... as the policy allows. ``deadline``
        (:func:`time.monotonic`): no wait past it; then ``past_deadline(attempts made)``
        is raised (None: the last Transient's error)."""
        retrying = AsyncRetrying(sleep=asyncio.sleep,
                                 **self._options(deadline, past_deadline))
        try:
            async for trial in retrying:
                with trial:
                    return await attempt(trial.retry_state.attempt_number)
        except Transient as exc:
            raise exc.error from None
        raise AssertionError("unreachable")  # pragma: no cover (tenacity returns or raises)

    def run(self, attempt: Callable[[int], R]) -> R:
        """:meth:`call` for a synchronous ``attempt``, without a deadline."""
        try:
            for trial in Retrying(sleep=time.sleep, **self._options(None, None)):
                with trial:
                    return attempt(trial.retry_state.attempt_number)
        except Transient as exc:
            raise exc.error from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _options(self, deadline: float | None,
                 past_deadline: Callable[[int], BaseException] | None) -> dict[str, Any]:
        backoff = (wait_random_exponential if self.jitter else wait_exponential)(
            multiplier=self.first, max=self.most)

        def wait(state: RetryCallState) -> float:
            failure = state.outcome.exception() if state.outcome is not None else None
            asked = failure.wait if isinstance(failure, Transient) else None
            pause = float(backoff(state) if asked is None else asked)
            if deadline is not None and time.monotonic() + pause > deadline:
                if past_deadline is not None:
                    raise past_deadline(state.attempt_number)
                assert isinstance(failure, Transient)
                raise failure.error
            return pause

        stop = stop_never if self.retries is None else stop_after_attempt(self.retries + 1)
        return {"stop": stop, "wait": wait, "reraise": True,
                "retry": retry_if_exception_type(Transient)}
