"""The one compare-and-swap loop (:mod:`expgit.store.cas`): bounded attempts, the
caller's "gave up" error or the last RefMovedError (exit 3), other errors at once (a
locked ref: exit 4), a failure that already read the new tip builds on it."""

from __future__ import annotations

import pytest

from expgit.errors import EXIT_CONFLICT, EXIT_LOCKED, ConflictError, LockHeldError
from expgit.git.repo import RefMovedError
from expgit.store.cas import TipMoved, compare_and_swap


def test_it_gives_up_after_the_attempts_with_the_callers_error() -> None:
    reads: list[int] = []
    moves: list[tuple[int, int]] = []

    def read() -> int:
        reads.append(len(reads))
        return len(reads)

    def move(tip: int, built: int) -> str:
        moves.append((tip, built))
        raise RefMovedError("moved")

    with pytest.raises(ConflictError, match="gave up after 4") as info:
        compare_and_swap(read, lambda tip: tip * 10, move, attempts=4,
                         gave_up=lambda n: ConflictError(f"gave up after {n}"))
    assert info.value.exit_code == EXIT_CONFLICT
    assert moves == [(1, 10), (2, 20), (3, 30), (4, 40)]  # each attempt re-reads the tip


def test_without_a_gave_up_error_the_last_ref_moved_error_is_raised() -> None:
    def move(tip: str, built: str) -> str:
        raise RefMovedError(f"moved at {tip}")

    with pytest.raises(RefMovedError, match="moved at t") as info:
        compare_and_swap(lambda: "t", lambda tip: tip, move, attempts=2)
    assert info.value.exit_code == EXIT_CONFLICT


def test_a_success_reports_its_attempt_and_a_moved_tip_is_built_on() -> None:
    seen: list[str] = []

    def move(tip: str, built: str) -> str:
        seen.append(built)
        if tip == "old":
            raise TipMoved("new")  # read already: not read again
        return f"moved onto {tip}"

    done = compare_and_swap(lambda: "old", lambda tip: f"built on {tip}", move, attempts=3)
    assert (done.result, done.attempts) == ("moved onto new", 2)
    assert seen == ["built on old", "built on new"]


def test_a_failure_retry_refuses_is_raised_at_once() -> None:
    calls = []

    def move(tip: str, built: str) -> str:
        calls.append(tip)
        raise RefMovedError("another ref moved")

    with pytest.raises(RefMovedError):
        compare_and_swap(lambda: "t", lambda tip: tip, move, attempts=5,
                         retry=lambda tip: False)
    assert calls == ["t"]


def test_other_errors_are_not_retried() -> None:
    calls = []

    def build(tip: str) -> str:
        calls.append(tip)
        raise LockHeldError("a ref is locked")

    with pytest.raises(LockHeldError) as info:
        compare_and_swap(lambda: "t", build, lambda tip, built: built, attempts=5)
    assert info.value.exit_code == EXIT_LOCKED and calls == ["t"]
