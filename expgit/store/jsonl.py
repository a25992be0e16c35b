"""JSON Lines files of pydantic models (recorded rollouts, outcome records): read whole,
validated line by line, refused with the line number and the field at fault."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from expgit.errors import InvalidInputError, NotFoundError

M = TypeVar("M", bound=BaseModel)


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
            items.append(model.model_validate(json.loads(line)))
        except ValueError as exc:  # JSONDecodeError and pydantic's ValidationError
            detail = ("; ".join(f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}"
                                for e in exc.errors()[:5])
                      if isinstance(exc, ValidationError) else f"not valid JSON: {exc}")
            raise InvalidInputError(f"{path}: line {number}: {detail}") from None
    return items
