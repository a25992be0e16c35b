"""The one retry policy (:mod:`expgit.llm.retry`): bounded attempts, numbered; the
caller's give-up error; other errors at once; the server's wait; no wait past the
deadline."""

from __future__ import annotations

import asyncio
import time

import pytest

from expgit.errors import ConflictError, ExpgitError, UsageError
from expgit.llm.retry import RetryPolicy, Transient


def test_it_gives_up_after_the_retries_with_the_last_error() -> None:
    seen: list[int] = []

    def attempt(n: int) -> str:
        seen.append(n)
        raise Transient(ExpgitError(f"failed {n} times"))

    with pytest.raises(ExpgitError, match="failed 3 times"):
        RetryPolicy(2, 0.0, 0.0).run(attempt)
    assert seen == [1, 2, 3]


def test_a_success_after_failures_returns_and_other_errors_are_not_retried() -> None:
    seen: list[int] = []

    def flaky(n: int) -> str:
        seen.append(n)
        if n < 3:
            raise Transient(ExpgitError("busy"))
        return f"ok on {n}"

    assert RetryPolicy(None, 0.0, 0.0).run(flaky) == "ok on 3"

    def refused(n: int) -> str:
        seen.append(n)
        raise UsageError("no")

    seen.clear()
    with pytest.raises(UsageError):
        RetryPolicy(5, 0.0, 0.0).run(refused)
    assert seen == [1]


def test_a_wait_past_the_deadline_is_not_taken() -> None:
    async def go() -> list[int]:
        seen: list[int] = []

        async def attempt(n: int) -> str:
            seen.append(n)
            raise Transient(ExpgitError("busy"), wait=3600.0)  # the server asks an hour

        with pytest.raises(ConflictError, match="after 1 attempts"):
            await RetryPolicy(5, 0.0, 0.0).call(
                attempt, deadline=time.monotonic() + 60,
                past_deadline=lambda n: ConflictError(f"after {n} attempts"))
        with pytest.raises(ExpgitError, match="busy"):  # no past_deadline: the last error
            await RetryPolicy(5, 0.0, 0.0).call(attempt, deadline=time.monotonic() + 60)
        return seen

    assert asyncio.run(go()) == [1, 1]


def test_the_servers_wait_is_taken() -> None:
    slept: list[float] = []

    async def go() -> str:
        async def attempt(n: int) -> str:
            if n == 1:
                raise Transient(ExpgitError("busy"), wait=0.05)
            return "ok"

        started = time.monotonic()
        result = await RetryPolicy(1, 30.0, 30.0).call(attempt)  # the backoff would be 30 s
        slept.append(time.monotonic() - started)
        return result

    assert asyncio.run(go()) == "ok" and slept[0] < 20
