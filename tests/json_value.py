"""Typed reads of free-form JSON in tests (a rollout's or a case's metadata, an
environment's state, a service's reply): each step checks the shape the test expects, so
a wrong shape fails the test with an AssertionError instead of a KeyError or TypeError,
and mypy sees the type of what the test compares."""

from __future__ import annotations

from pydantic import JsonValue


def dig(value: JsonValue, *path: str | int) -> JsonValue:
    """``value[path[0]][path[1]]...``: each ``str`` step an object's key, each ``int`` a
    list's index."""
    for step in path:
        if isinstance(step, str):
            assert isinstance(value, dict), f"not an object at {step!r}: {value!r}"
            value = value[step]
        else:
            assert isinstance(value, list), f"not a list at {step}: {value!r}"
            value = value[step]
    return value


def obj(value: JsonValue, *path: str | int) -> dict[str, JsonValue]:
    """The object at ``path``."""
    found = dig(value, *path)
    assert isinstance(found, dict), f"not an object: {found!r}"
    return found


def items(value: JsonValue, *path: str | int) -> list[JsonValue]:
    """The list at ``path``."""
    found = dig(value, *path)
    assert isinstance(found, list), f"not a list: {found!r}"
    return found


def text(value: JsonValue, *path: str | int) -> str:
    """The string at ``path``."""
    found = dig(value, *path)
    assert isinstance(found, str), f"not a string: {found!r}"
    return found


def number(value: JsonValue, *path: str | int) -> float:
    """The number at ``path`` (not a bool)."""
    found = dig(value, *path)
    assert isinstance(found, int | float) and not isinstance(found, bool), \
        f"not a number: {found!r}"
    return found
