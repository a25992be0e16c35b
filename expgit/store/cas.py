"""The one compare-and-swap loop of expgit's writers (docs/design.md, "Compare-and-swap
on main"): read the tip, build on it, move the ref(s) only if the tip is unchanged; a
RefMovedError (another writer moved it) starts over on the new tip, a bounded number of
times. The ref writer itself (``GitRepo.update_refs``, a leased push) is the caller's."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from expgit.errors import ExpgitError
from expgit.git.repo import RefMovedError

TipT = TypeVar("TipT")
BuiltT = TypeVar("BuiltT")
ResultT = TypeVar("ResultT")

__all__ = ["Swapped", "TipMoved", "compare_and_swap"]


class TipMoved(RefMovedError, Generic[TipT]):
    """A move that failed because the tip moved, and already read where to (a remote's
    tip, fetched after a refused lease): the next attempt builds on ``tip``."""

    def __init__(self, tip: TipT) -> None:
        super().__init__("the tip moved")
        self.tip = tip


@dataclass(frozen=True)
class Swapped(Generic[ResultT]):
    """What the move returned, and the attempt it succeeded on (1 for the first)."""

    result: ResultT
    attempts: int


def compare_and_swap(read: Callable[[], TipT], build: Callable[[TipT], BuiltT],
                     move: Callable[[TipT, BuiltT], ResultT], *, attempts: int,
                     jitter: float = 0.0, retry: Callable[[TipT], bool] | None = None,
                     gave_up: Callable[[int], ExpgitError] | None = None
                     ) -> Swapped[ResultT]:
    """``move(tip, build(tip))`` for ``tip = read()``, again on the new tip while either
    raises RefMovedError, at most ``attempts`` times. ``retry(tip)`` (if given) says
    whether the failure is worth another attempt (False: the last RefMovedError is
    raised at once); ``jitter``: the pause before attempt ``n + 1`` is uniform in
    ``[0, jitter * n]`` seconds, to spread out colliding writers; ``gave_up(attempts)``:
    the error after the last attempt (None: the last RefMovedError)."""
    tip = read()
    for attempt in range(1, attempts + 1):
        try:
            return Swapped(move(tip, build(tip)), attempt)
        except RefMovedError as exc:
            if retry is not None and not retry(tip):
                raise
            if attempt == attempts:
                if gave_up is None:
                    raise
                raise gave_up(attempts) from None
            if jitter:
                time.sleep(random.uniform(0, jitter * attempt))
            tip = exc.tip if isinstance(exc, TipMoved) else read()
    raise ValueError("attempts must be at least 1")
