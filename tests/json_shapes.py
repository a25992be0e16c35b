"""The ``--json`` shapes as docs/json-output.md's tables document them, and a check
of a command's real output against them: the tables are the spec the tests read, so the
documentation cannot drift from the output.

Notation of a table cell (see docs/json-output.md): ``{"a", "b": [id]}`` an object with exactly
these keys; ``[shape]`` a list of such items; ``...name`` all the fields of a named
object; ``{name: diff}`` a mapping (its keys are data); ``id`` a 12-hex id, ``commit`` a
40-hex commit, ``str`` a string; a named object of the first table; anything else
(``or null``, a trailing remark) is prose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parents[1] / "docs" / "json-output.md"
ID = re.compile(r"[0-9a-f]{12}")
SHA = re.compile(r"[0-9a-f]{40}")
_TOKEN = re.compile(r'"[^"]*"|\.\.\.\w+|[{}\[\],:]|[\w-]+')

# Key-name rules that hold in every document, whatever the tables say.
ID_KEYS = {"proposal", "proposals", "invalidation_proposals", "gradients"}
COMMIT_KEYS = {"commit", "base", "base_commit", "previous", "last_commit", "reverted",
               "reverts", "reverted_by", "main_before", "main_after", "blob", "base_blob",
               "commits", "gradient_commits", "applied_commits"}
TIME_KEYS = {"time", "created_at", "last_used"}


@dataclass
class Shape:
    kind: str  # "object" | "map" | "list" | "word"
    keys: dict[str, Shape | None] = field(default_factory=dict)
    spreads: list[str] = field(default_factory=list)
    item: Shape | None = None
    word: str = ""
    nullable: bool = False


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _TOKEN.findall(text)
        self.at = 0

    def peek(self) -> str:
        return self.tokens[self.at] if self.at < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        assert expected is None or token == expected, (expected, token, self.tokens)
        self.at += 1
        return token

    def shape(self) -> Shape:
        token = self.take()
        if token == "{":
            shape = self.object()
        elif token == "[":
            shape = Shape("list", item=self.shape())
            self.take("]")
        else:
            shape = Shape("word", word=token)
        while self.peek() not in ("", ",", "}", "]"):  # prose: "or null", a remark
            shape.nullable |= self.take() == "null"
        return shape

    def object(self) -> Shape:
        shape = Shape("object")
        while self.peek() != "}":
            token = self.take()
            if token.startswith("..."):
                shape.spreads.append(token[3:])
            elif token.startswith('"'):
                shape.keys[token[1:-1]] = None
                if self.peek() == ":":
                    self.take()
                    shape.keys[token[1:-1]] = self.shape()
            else:  # {name: diff}: a mapping whose keys are data
                shape.kind = "map"
                self.take(":")
                self.shape()
            if self.peek() == ",":
                self.take()
        self.take("}")
        return shape


def _cells(section: str, header: str) -> list[tuple[str, str]]:
    """The (first cell, second cell) rows of the table whose header row is ``header``."""
    table = section.split(header, 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.strip().splitlines()[1:]:  # after the |---| line
        first, second = line.strip().strip("|").split(" | ", 1)
        rows.append((first.strip(), second.strip()))
    return rows


@cache
def documented() -> tuple[dict[str, Shape], dict[str, Shape]]:
    """The named objects and each command's shape, from docs/json-output.md."""
    section = PAGE.read_text()
    objects = {name.strip("`"): _Parser(cell.split("`")[1]).shape()
               for name, cell in _cells(section, "| object | fields |")}
    commands: dict[str, Shape] = {}
    for names, cell in _cells(section, "| command | prints |"):
        for name in re.findall(r"`([^`]+)`", names):
            commands[name] = _Parser(cell.split("`")[1]).shape()
    return objects, commands


def documented_keys(command: str) -> set[str]:
    objects, commands = documented()
    return set(_keys(commands[command], objects))


def _keys(shape: Shape, objects: dict[str, Shape]) -> dict[str, Shape | None]:
    if shape.kind == "word" and shape.word in objects:
        return _keys(objects[shape.word], objects)
    keys: dict[str, Shape | None] = {}
    for name in shape.spreads:
        keys |= _keys(objects[name], objects)
    return keys | shape.keys


def _check(data: Any, shape: Shape, objects: dict[str, Shape], where: str) -> None:
    if data is None and shape.nullable:
        return
    if shape.kind == "word":
        if shape.word in objects:
            _check(data, objects[shape.word], objects, f"{where}<{shape.word}>")
            if shape.word in ("gradient", "proposal"):
                assert ID.fullmatch(data["id"]), (where, data["id"])
        elif shape.word == "id":
            assert isinstance(data, str) and ID.fullmatch(data), (where, data)
        elif shape.word == "commit":
            assert isinstance(data, str) and SHA.fullmatch(data), (where, data)
        elif shape.word == "str":
            assert isinstance(data, str), (where, data)
        return
    if shape.kind == "list":
        assert isinstance(data, list), (where, data)
        assert shape.item is not None
        for i, item in enumerate(data):
            _check(item, shape.item, objects, f"{where}[{i}]")
        return
    assert isinstance(data, dict), (where, data)
    if shape.kind == "map":
        return
    keys = _keys(shape, objects)
    assert set(data) == set(keys), (
        f"{where}: undocumented {sorted(set(data) - set(keys))}, "
        f"missing {sorted(set(keys) - set(data))}")
    for key, value_shape in keys.items():
        if value_shape is not None:
            _check(data[key], value_shape, objects, f"{where}.{key}")


def _conventions(data: Any, where: str) -> None:
    """Ids 12 hex, commits 40 hex, times whole seconds, wherever their keys appear."""
    if isinstance(data, list):
        for i, item in enumerate(data):
            _conventions(item, f"{where}[{i}]")
        return
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        strings = [value] if isinstance(value, str) else (
            value if isinstance(value, list) and all(isinstance(v, str) for v in value)
            else [])
        pattern = ID if key in ID_KEYS else SHA if key in COMMIT_KEYS else None
        if pattern is not None:
            bad = [s for s in strings if not pattern.fullmatch(s)]
            assert not bad, f"{where}.{key}: {bad} are not {pattern.pattern}"
        if key in TIME_KEYS:
            assert value is None or type(value) is int, f"{where}.{key}: {value!r}"
        _conventions(value, f"{where}.{key}")


def assert_shape(command: str, data: Any) -> None:
    """``data`` (``command --json``'s document) has the shape docs/json-output.md documents."""
    objects, commands = documented()
    assert isinstance(data, dict), f"{command}: a bare {type(data).__name__}, not an object"
    _check(data, commands[command], objects, command)
    _conventions(data, command)
