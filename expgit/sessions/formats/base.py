"""The contract of one row format, and helpers the formats share. A format's row models
ignore keys they do not name (pydantic's default): rows carry many."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from expgit.core.jsonl import loads_untrusted
from expgit.sessions.formats.transcript_builder import TranscriptBuilder

Claim = Literal["no", "maybe", "yes"]
Row = dict[str, Any]


class RowFormat(Protocol):
    """One ``.jsonl`` row shape (OpenAI, Anthropic, Claude Code).

    :meth:`claims` says whether a row is of this shape: ``yes`` (only this format writes
    rows like it), ``maybe`` (it could be; e.g. a plain ``{"role", "content": str}`` row
    is both OpenAI and Anthropic) or ``no``. It never raises.
    :meth:`add_row` adds the row's message(s) to ``builder`` (reasoning is counted in
    ``builder.reasoning_dropped``, rows deliberately left out in ``builder.skipped``) and
    returns True; it returns False, adding nothing, for a row that is not of this shape
    (the caller reports its line as invalid). It never raises for bad row content.
    """

    name: str

    def claims(self, row: Row) -> Claim: ...

    def add_row(self, row: Row, line: int, builder: TranscriptBuilder) -> bool: ...


def parse_arguments(arguments: object) -> dict[str, object]:
    """Tool-call arguments as a dict: a JSON object (as text or already decoded);
    anything else is kept whole as ``{"arguments": value}``."""
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            value = loads_untrusted(arguments)
        except ValueError:
            return {"arguments": arguments}
        return value if isinstance(value, dict) else {"arguments": arguments}
    return {} if arguments is None else {"arguments": arguments}


def placeholder(kind: str) -> str:
    """What stands in for content that is not text (an image, a file)."""
    return f"[{kind} omitted]"
