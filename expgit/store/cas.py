"""The one compare-and-swap loop of expgit's writers (docs/design.md, "Compare-and-swap on main").

Every write of a branch others may move (``main`` by ``apply``, a remote's branch by a
leased push, a side branch by concurrent recorders) goes the same way: read the tip,
build the new objects on it, and move the ref(s) only if the tip is still there. A
:class:`~expgit.git.repo.RefMovedError` from the build or the move (another writer
moved it meanwhile) starts over on the new tip, with jitter between attempts, at most
``attempts`` times; then the caller's "gave up" error, or the last RefMovedError
(exit 3 either way). Any other error ends the loop at once. The ref writer itself is
:meth:`expgit.git.repo.GitRepo.update_refs` (or ``git push --force-with-lease``):
this module only decides when to try again.
"""

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
