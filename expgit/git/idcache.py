"""A bounded cache of values by git object id, safe to share between threads.

An object id names immutable content, so a cached value can never be stale: the only
question is how much to keep. Kept by measure (issue 36, docs/development.md): a
10,000-entry tree costs 5.5 ms to read and 27 ms to parse, a hit nothing, and a command
reads the same trees many times (snapshot, listing, diff).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class IdCache(Generic[V]):
    """A bounded cache of values by object id (or pair of ids), safe across threads.

    Oldest first out once the total ``weight`` of the values exceeds ``limit`` (the
    newest value is always kept). Reads take no lock unless ``touch`` asks to mark the
    value as recently used; every change is made under the lock."""

    def __init__(self, limit: int, weight: Callable[[V], int] = lambda _: 1) -> None:
        self._items: OrderedDict[object, V] = OrderedDict()
        self._limit = limit
        self._weight = weight
        self._total = 0
        self._lock = threading.Lock()

    def get(self, key: object, touch: bool = False) -> V | None:
        if not touch:
            return self._items.get(key)
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: object, value: V) -> None:
        with self._lock:
            if key in self._items:
                return
            self._items[key] = value
            self._total += self._weight(value)
            while self._total > self._limit and len(self._items) > 1:
                self._total -= self._weight(self._items.popitem(last=False)[1])
