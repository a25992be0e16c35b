"""JSON Lines files of pydantic models (recorded rollouts, outcome records): read whole,
validated line by line, refused with the line number and the field at fault; and
:func:`loads_untrusted`, the one ``json.loads`` for text expgit did not write (session
logs, a model's answer), which bounds how deeply it may nest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from expgit.errors import InvalidInputError, NotFoundError

M = TypeVar("M", bound=BaseModel)
MAX_JSON_DEPTH = 200  # arrays and objects inside each other; real records nest < 20


def loads_untrusted(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)``, with a value nested more than ``max_depth`` levels deep
    refused as a ValueError like any invalid JSON: one line of ``[[[[…`` would otherwise
    end the parser, or whatever walks the value later, with a RecursionError."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nested more than {max_depth} levels deep") from None
    openers = (text.count(b"[") + text.count(b"{") if isinstance(text, bytes)
               else text.count("[") + text.count("{"))
    if openers > max_depth and _nested_deeper(value, max_depth):
        raise ValueError(f"JSON nested more than {max_depth} levels deep")
    return value


def _nested_deeper(value: Any, max_depth: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, dict | list))
    return False


def load_jsonl(path: Path, model: type[M], what: str) -> list[M]:
    """Every non-blank line of ``path`` as a ``model``; ``what`` names the file in errors
    ("rollouts", "outcomes"). NotFoundError if it is missing, InvalidInputError (with the
    line number) on the first bad line."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{path}: cannot read the {what} file: {exc}") from None
    items: list[M] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(model.model_validate(loads_untrusted(line)))
        except ValueError as exc:  # JSONDecodeError and pydantic's ValidationError
            detail = ("; ".join(f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}"
                                for e in exc.errors()[:5])
                      if isinstance(exc, ValidationError) else f"not valid JSON: {exc}")
            raise InvalidInputError(f"{path}: line {number}: {detail}") from None
    return items
