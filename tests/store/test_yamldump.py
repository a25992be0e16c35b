"""expgit.store.format.yamldump.safe_dump writes exactly what yaml.safe_dump writes."""

from __future__ import annotations

import random
from typing import Any

import pytest
import yaml

from expgit.store.format.yamldump import libyaml_safe, safe_dump

TRICKY = "abcdefgh xyz \n\t:#-'\"{}[]&*!|>%@`,.?~\\/=éü中文—…\ufeff\u00a0"
HOSTILE = TRICKY + "\u2028\u2029\x85\x00\x1b\x7f\U0001f600\r"
SCALARS: list[Any] = [None, True, False, 0, -3, 1.5, 1e20, -1e-300, float("nan"),
                      float("inf"), 10**30, "yes", "no", "null", "0x1f", "1.0", "", " ",
                      "~", "2024-01-01", "- a", "? x", "#", "a: b", "'", '"', "|", ">"]


def value(rng: random.Random, alphabet: str, long: int, depth: int = 0) -> Any:
    def text(size: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, size)))
    roll = rng.random()
    if depth < 4 and roll < 0.2:
        return {text(rng.choice((3, 20, long))) or "k": value(rng, alphabet, long, depth + 1)
                for _ in range(rng.randint(0, 4))}
    if depth < 4 and roll < 0.35:
        return [value(rng, alphabet, long, depth + 1) for _ in range(rng.randint(0, 4))]
    if roll < 0.5:
        return rng.choice(SCALARS)
    return text(rng.choice((5, 60, long)))


@pytest.mark.parametrize("alphabet, long", [(TRICKY, 150), (TRICKY, 1200), (HOSTILE, 150),
                                            (HOSTILE, 1200)])
@pytest.mark.slow
def test_same_text_as_yaml_safe_dump(alphabet: str, long: int) -> None:
    rng = random.Random(len(alphabet) * long)
    fast = 0
    for _ in range(600):
        data = {"name": value(rng, alphabet, 30), "evaluation": value(rng, alphabet, long),
                "items": [value(rng, alphabet, long), {"k": value(rng, alphabet, long)}]}
        for width in (1000, 80):
            assert safe_dump(data, width=width) == yaml.safe_dump(
                data, sort_keys=False, allow_unicode=True, width=width)
        fast += libyaml_safe(data)
    if alphabet == TRICKY and long < 200:
        assert fast > 20  # the fast path was exercised


def test_what_libyaml_would_write_otherwise_goes_the_slow_way() -> None:
    assert libyaml_safe({"name": "x", "tags": ["a", "b"], "n": 1.5, "ok": None})
    assert not libyaml_safe({"": 1})  # an empty key
    assert not libyaml_safe({"k" * 101: 1})  # a long key
    assert not libyaml_safe({"k": "v" * 201})  # a long string: folded differently
    assert not libyaml_safe({"k": "a\u2028b"}) and not libyaml_safe({"k": "a\x85"})
    assert not libyaml_safe({"k": "\U0001f600"}) and not libyaml_safe({"k": (1, 2)})
    assert safe_dump({"k": "\U0001f600"}) == "k: \U0001f600\n"
