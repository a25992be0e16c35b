"""``--json`` output is exactly what ``json.dumps(data, indent=2, default=str)`` writes."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from expgit.cli._json import pretty_json

EDGES: list[Any] = [
    {}, [], (), "", 0, None, True, 1.5, float("nan"), "ünïcode ✓",
    {"a": {}, "b": [], "c": [{}], "d": [[]]},
    {"text": 'a string with ,\n  "quotes" and a separator inside', "n": 3},
    {3: "int key", None: "null key", True: "bool key", 2.5: "float key"},
    {"nested": {1: {"deep": [1, (2, 3), {"x": None}]}}},
    {"when": datetime(2026, 12, 1, tzinfo=UTC), "set": {1}},
    [{"name": f"row-{i}", "version": i, "problem": None} for i in range(50)],
]


def random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(9 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randrange(-10**6, 10**6)
    if kind == 2:
        return rng.random() * 100
    if kind in (3, 4):
        return "".join(rng.choice("ab ,:\n\"\\é{}[]") for _ in range(rng.randrange(8)))
    if kind in (5, 6):
        return {f"k{i}": random_value(rng, depth + 1) for i in range(rng.randrange(5))}
    return [random_value(rng, depth + 1) for _ in range(rng.randrange(5))]


@pytest.mark.parametrize("value", EDGES, ids=range(len(EDGES)))
def test_edge_cases_match_the_standard_library(value: Any) -> None:
    assert pretty_json(value) == json.dumps(value, indent=2, default=str)


def test_random_documents_match_the_standard_library() -> None:
    rng = random.Random(20261201)
    for _ in range(2000):
        value = random_value(rng, 0)
        assert pretty_json(value) == json.dumps(value, indent=2, default=str)


def test_random_tables_of_rows_match_the_standard_library() -> None:
    """Lists of flat rows (the fast path), with strings that look like its separators."""
    rng = random.Random(7)
    tricky = ["}, {", '},\n    {', "{", "}", "\n", "  ", ",", '"', ""]
    for _ in range(500):
        rows = [{f"f{j}": rng.choice([*tricky, None, 1, 2.5, True])
                 for j in range(rng.randrange(1, 5))} for _ in range(rng.randrange(1, 6))]
        value: Any = {"rows": rows} if rng.random() < 0.5 else rows
        assert pretty_json(value) == json.dumps(value, indent=2, default=str)
