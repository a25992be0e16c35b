"""Rubric criterion checks. All but ``llm_judge`` are pure functions of the answer text.

Each check looks at ``target``: the final assistant answer (default) or the whole
transcript. ``json_field_equals`` and ``numeric`` with a ``path`` parse the target as JSON
and follow a dotted path (``order.items.0.qty``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Target = Literal["final_answer", "transcript"]


class _Check(BaseModel):
    model_config = ConfigDict(extra="forbid")
    target: Target = "final_answer"


class ContainsCheck(_Check):
    type: Literal["contains"] = "contains"
    value: str
    case_sensitive: bool = False


class NotContainsCheck(_Check):
    type: Literal["not_contains"] = "not_contains"
    value: str
    case_sensitive: bool = False


class RegexCheck(_Check):
    type: Literal["regex"] = "regex"
    pattern: str
    ignore_case: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regular expression: {exc}") from None
        return value


class EqualsCheck(_Check):
    type: Literal["equals"] = "equals"
    value: str
    case_sensitive: bool = False


class JsonFieldEqualsCheck(_Check):
    type: Literal["json_field_equals"] = "json_field_equals"
    path: str
    value: Any


class NumericCheck(_Check):
    type: Literal["numeric"] = "numeric"
    value: float
    tolerance: float = Field(default=0.0, ge=0)
    path: str | None = None  # JSON path; else the first number in the text


class LLMJudgeCheck(_Check):
    type: Literal["llm_judge"] = "llm_judge"
    instructions: str


CriterionCheck = Annotated[
    ContainsCheck | NotContainsCheck | RegexCheck | EqualsCheck | JsonFieldEqualsCheck
    | NumericCheck | LLMJudgeCheck, Field(discriminator="type")]

# A number: "1,000.5" (thousands commas), "2,5" (a decimal comma), or "3.25".
_NUMBER = re.compile(
    r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])|-?\d+,\d{1,2}(?!\d)|-?\d+(?:\.\d+)?")
_MISSING = object()


def _json_path(text: str, path: str) -> Any:
    try:
        node: Any = json.loads(_strip_fence(text))
    except ValueError:
        return _MISSING
    for key in path.split("."):
        if isinstance(node, list) and key.lstrip("-").isdigit() and -len(node) <= int(key) < len(
                node):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return _MISSING
    return node


def _strip_fence(text: str) -> str:
    """The JSON payload of an answer: the first fenced block if there is one, else all."""
    match = re.search(r"```[a-zA-Z0-9]*\n(.*?)\n```", text, re.S)
    return match.group(1) if match else text.strip()


def _number(text: str) -> str:
    head, _, tail = text.rpartition(",")
    return text.replace(",", ".") if head and len(tail) <= 2 else text.replace(",", "")


def run_check(check: CriterionCheck, text: str) -> tuple[bool, str]:
    """(passed, one-line feedback) of a non-LLM check on ``text``."""
    if isinstance(check, ContainsCheck | NotContainsCheck | EqualsCheck):
        hay, needle = (text, check.value) if check.case_sensitive else (
            text.casefold(), check.value.casefold())
        if isinstance(check, EqualsCheck):
            ok = hay.strip() == needle.strip()
            return ok, f"answer {'equals' if ok else 'differs from'} {check.value!r}"
        found = needle in hay
        if isinstance(check, ContainsCheck):
            return found, f"{'found' if found else 'missing'}: {check.value!r}"
        return not found, f"{'forbidden text present' if found else 'absent'}: {check.value!r}"
    if isinstance(check, RegexCheck):
        ok = re.search(check.pattern, text, re.I if check.ignore_case else 0) is not None
        return ok, f"pattern {check.pattern!r} {'matched' if ok else 'did not match'}"
    if isinstance(check, JsonFieldEqualsCheck):
        got = _json_path(text, check.path)
        if got is _MISSING:
            return False, f"no JSON field {check.path!r} in the answer"
        return got == check.value, f"{check.path} = {got!r}, expected {check.value!r}"
    if isinstance(check, NumericCheck):
        raw: Any = _json_path(text, check.path) if check.path else (
            _number(m.group(0)) if (m := _NUMBER.search(text)) else _MISSING)
        try:
            number = float(raw) if raw is not _MISSING else math.nan
        except (TypeError, ValueError):
            number = math.nan
        if math.isnan(number):
            return False, "no number found in the answer"
        ok = abs(number - check.value) <= check.tolerance
        return ok, f"{number:g} vs expected {check.value:g} (tolerance {check.tolerance:g})"
    raise TypeError(f"{check.type} needs an LLM judge, not run_check")
