"""Rubric criterion checks. All but ``llm_judge`` are pure functions of the answer text,
or, for the action checks (``db_state``, ``tool_called``, ``tool_not_called``), of the
tool calls a rollout made and the final state of its tool environment; ``tau2_reward``
is tau2-bench's reward of the whole conversation (:mod:`expgit.train.tau2.reward`).

Each check looks at ``target``: the final assistant answer (default) or the whole
transcript. ``json_field_equals`` and ``numeric`` with a ``path`` parse the target as JSON
and follow a dotted path (``order.items.0.qty``).

``regex`` runs on the ``regex`` module with a time bound (``REGEX_TIMEOUT_SECONDS``), as
.NET's ``Regex`` match timeout does for patterns it does not trust: a rubric such as
``(a|aa)+$`` cannot stall a service. Its syntax is Python's ``re`` (lookaround and all).
A pattern that cannot be compiled is refused when the rubric is read; a check that runs
out of time, or whose pattern still fails, fails with the reason.
"""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Annotated, Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, field_validator

from expgit.core.jsonl import loads_untrusted

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
        problem = regex_problem(value)
        if problem is not None:
            raise ValueError(f"invalid regular expression: {problem}")
        return value


REGEX_TIMEOUT_SECONDS = 1.0  # one regex check's matching time, at most


@functools.lru_cache(maxsize=256)
def _regex(pattern: str, ignore_case: bool) -> regex.Pattern[str]:
    return regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)


def regex_problem(pattern: str, ignore_case: bool = False) -> str | None:
    """Why ``pattern`` cannot be compiled, or None (a pattern nested too deeply for the
    compiler is a problem too, not a crash)."""
    try:
        _regex(pattern, ignore_case)
    except regex.error as exc:
        return str(exc)
    except (RecursionError, OverflowError, MemoryError) as exc:
        return f"too complex to compile ({type(exc).__name__})"
    return None


def search_bounded(pattern: str, text: str, ignore_case: bool = False, *,
                   seconds: float = REGEX_TIMEOUT_SECONDS) -> tuple[bool | None, str]:
    """Whether ``pattern`` is found in ``text`` and a short note why not: None when it
    cannot be compiled or runs out of ``seconds`` (the ``regex`` module releases the GIL
    while it matches, and checks the time as it backtracks)."""
    problem = regex_problem(pattern, ignore_case)
    if problem is not None:
        return None, f"invalid pattern: {problem}"
    try:
        found = _regex(pattern, ignore_case).search(text, timeout=seconds) is not None
    except TimeoutError:
        return None, f"timed out after {seconds:g}s (catastrophic backtracking?)"
    return found, ""


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


class DbStateCheck(_Check):
    """The environment's final state has these values, by dotted path
    (``reservations.ZFA04Y.status: cancelled``)."""

    type: Literal["db_state"] = "db_state"
    expected: dict[str, Any] = Field(min_length=1)


class ToolCalledCheck(_Check):
    """A completed call of ``name`` whose arguments include ``arguments``."""

    type: Literal["tool_called"] = "tool_called"
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolNotCalledCheck(_Check):
    """No completed call of ``name`` (with ``arguments``: none with those arguments)."""

    type: Literal["tool_not_called"] = "tool_not_called"
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Tau2RewardCheck(_Check):
    """tau2-bench's reward of the conversation for task ``task_id`` of ``domain``
    (:mod:`expgit.train.tau2.reward`; the cases of ``--cases tau2:...`` carry it)."""

    type: Literal["tau2_reward"] = "tau2_reward"
    domain: Literal["airline"] = "airline"
    task_id: str


ActionCheck = DbStateCheck | ToolCalledCheck | ToolNotCalledCheck
CriterionCheck = Annotated[
    ContainsCheck | NotContainsCheck | RegexCheck | EqualsCheck | JsonFieldEqualsCheck
    | NumericCheck | LLMJudgeCheck | DbStateCheck | ToolCalledCheck | ToolNotCalledCheck
    | Tau2RewardCheck, Field(discriminator="type")]

# A number: "1,000.5" (thousands commas), "2,5" (a decimal comma), or "3.25".
_NUMBER = re.compile(
    r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])|-?\d+,\d{1,2}(?!\d)|-?\d+(?:\.\d+)?")
_MISSING = MISSING = object()


def _json_path(text: str, path: str) -> Any:
    try:
        node: Any = loads_untrusted(_strip_fence(text))
    except ValueError:
        return _MISSING
    return walk(node, path)


def walk(node: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``node``, or ``MISSING``."""
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
        matched, why = search_bounded(check.pattern, text, check.ignore_case)
        if matched is None:
            return False, f"pattern {check.pattern!r} failed: {why}"
        return matched, f"pattern {check.pattern!r} {'matched' if matched else 'did not match'}"
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


def run_action_check(check: ActionCheck, calls: list[tuple[str, dict[str, Any]]],
                     state: dict[str, Any] | None) -> tuple[bool, str]:
    """(passed, one-line feedback) of an action check on the completed tool ``calls``
    (name, arguments) and the final ``state`` (None: the rollout had no environment)."""
    if isinstance(check, DbStateCheck):
        if state is None:
            return False, "no final state: the rollout ran without a tool environment"
        wrong = []
        for path, value in check.expected.items():
            got = walk(state, path)
            if got != value:
                shown = "missing" if got is _MISSING else repr(got)
                wrong.append(f"{path} = {shown}, expected {value!r}")
        if wrong:
            return False, "final state differs: " + "; ".join(wrong)
        return True, "final state has " + ", ".join(f"{p} = {v!r}"
                                                    for p, v in check.expected.items())
    wanted = f"{check.name}({json.dumps(check.arguments, sort_keys=True)})" \
        if check.arguments else check.name
    hits = [args for name, args in calls if name == check.name
            and all(args.get(k) == v for k, v in check.arguments.items())]
    if isinstance(check, ToolCalledCheck):
        return bool(hits), (f"called {wanted}" if hits else
                            f"never called {wanted}; calls made: "
                            f"{', '.join(n for n, _ in calls) or 'none'}")
    return not hits, (f"called {wanted}, which must not be called" if hits
                      else f"did not call {wanted}")
