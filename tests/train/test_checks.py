"""Rubric criterion checks (expgit.core.checks): every check type and its edge cases."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from expgit.core.checks import (
    ContainsCheck,
    CriterionCheck,
    EqualsCheck,
    JsonFieldEqualsCheck,
    LLMJudgeCheck,
    NotContainsCheck,
    NumericCheck,
    RegexCheck,
    run_check,
)

ADAPTER: TypeAdapter[CriterionCheck] = TypeAdapter(CriterionCheck)


def check(**data: Any) -> CriterionCheck:
    return ADAPTER.validate_python(data)


def test_contains_is_case_insensitive_by_default() -> None:
    assert run_check(ContainsCheck(value="Cannot"), "You CANNOT cancel it.")[0]
    ok, feedback = run_check(ContainsCheck(value="refund"), "No money back.")
    assert not ok and "missing" in feedback and "'refund'" in feedback


def test_contains_case_sensitive() -> None:
    assert not run_check(ContainsCheck(value="Cannot", case_sensitive=True), "cannot")[0]
    assert run_check(ContainsCheck(value="Cannot", case_sensitive=True), "Cannot")[0]


def test_not_contains() -> None:
    ok, feedback = run_check(NotContainsCheck(value="refund to"), "A REFUND TO your card")
    assert not ok and "forbidden" in feedback
    assert run_check(NotContainsCheck(value="refund to"), "No refund.")[0]
    assert run_check(NotContainsCheck(value="Refund", case_sensitive=True), "refund")[0]


def test_regex_ignore_case() -> None:
    assert not run_check(RegexCheck(pattern=r"\bcannot\b"), "I CANNOT do that")[0]
    ok, feedback = run_check(RegexCheck(pattern=r"\bcannot\b", ignore_case=True),
                             "I CANNOT do that")
    assert ok and "matched" in feedback
    # search, not fullmatch: a match anywhere in a multi-line answer counts
    assert run_check(RegexCheck(pattern=r"^24 hours"), "first line\n24 hours")[0] is False
    assert run_check(RegexCheck(pattern=r"24 hours"), "first line\nwithin 24 hours")[0]


def test_regex_invalid_pattern_is_refused_at_validation() -> None:
    with pytest.raises(ValidationError, match="invalid regular expression"):
        RegexCheck(pattern="(unclosed")


def test_regex_too_deeply_nested_is_refused_not_a_crash() -> None:
    with pytest.raises(ValidationError, match="invalid regular expression"):
        RegexCheck(pattern="(" * 5000 + ")" * 5000)


def _run_in_child(code: str) -> tuple[bool, str]:
    """``run_check`` in a child process, waited for generously: a regression (an engine
    that backtracks for ever, holding the GIL) fails the test instead of hanging it."""
    done = subprocess.run([sys.executable, "-c", "import json, sys\n"
                           "from expgit.core.checks import RegexCheck, run_check\n" + code],
                          capture_output=True, text=True, timeout=120, check=True)
    ok, feedback = json.loads(done.stdout)
    return ok, feedback


def test_regex_nested_quantifier_returns_promptly_as_a_failed_check() -> None:
    # stdlib re backtracks 2**40 times on this (the stalled service)
    ok, feedback = _run_in_child(
        "print(json.dumps(run_check(RegexCheck(pattern='(a+)+$'), 'a' * 40 + 'b')))")
    assert not ok and "did not match" in feedback


@pytest.mark.slow
def test_regex_that_runs_out_of_time_fails_with_the_reason() -> None:
    ok, feedback = _run_in_child(
        "print(json.dumps(run_check(RegexCheck(pattern='(a|aa)+$'), 'a' * 60 + 'b')))")
    assert not ok and "timed out" in feedback and "(a|aa)+$" in feedback


def test_regex_keeps_python_syntax_lookbehind() -> None:
    eligible = RegexCheck(pattern=r"\b(?<!not )eligible\b", ignore_case=True)
    assert run_check(eligible, "You are eligible.")[0]
    assert not run_check(eligible, "You are not eligible.")[0]


def test_equals_ignores_surrounding_whitespace_and_case() -> None:
    assert run_check(EqualsCheck(value="Yes"), "  yes\n")[0]
    assert not run_check(EqualsCheck(value="Yes"), "yes please")[0]
    assert not run_check(EqualsCheck(value="Yes", case_sensitive=True), "yes")[0]


def test_json_field_equals_plain_and_fenced() -> None:
    c = JsonFieldEqualsCheck(path="order.items.0.qty", value=2)
    assert run_check(c, '{"order": {"items": [{"qty": 2}]}}')[0]
    assert run_check(c, '```json\n{"order": {"items": [{"qty": 2}]}}\n```')[0]
    assert run_check(c, '  ```\n{"order": {"items": [{"qty": 2}]}}\n```\n')[0]
    ok, feedback = run_check(c, '{"order": {"items": [{"qty": 3}]}}')
    assert not ok and "expected 2" in feedback


def test_json_field_equals_missing_path_and_not_json() -> None:
    c = JsonFieldEqualsCheck(path="order.items.5.qty", value=2)
    ok, feedback = run_check(c, '{"order": {"items": [{"qty": 2}]}}')
    assert not ok and "no JSON field" in feedback
    assert not run_check(JsonFieldEqualsCheck(path="a", value=1), "a = 1")[0]
    assert not run_check(JsonFieldEqualsCheck(path="a.b", value=1), '{"a": 5}')[0]
    # negative list indexes count from the end; a top-level list is addressable
    assert run_check(JsonFieldEqualsCheck(path="-1", value="z"), '["x", "z"]')[0]


def test_json_field_equals_compares_types() -> None:
    assert not run_check(JsonFieldEqualsCheck(path="n", value="2"), '{"n": 2}')[0]
    assert run_check(JsonFieldEqualsCheck(path="ok", value=True), '{"ok": true}')[0]


def test_numeric_first_number_in_text() -> None:
    assert run_check(NumericCheck(value=100), "That will be $100 in total.")[0]
    assert run_check(NumericCheck(value=-3.5), "the delta is -3.5 points")[0]
    assert run_check(NumericCheck(value=2.5), "2,5 kg")[0]  # decimal comma
    ok, feedback = run_check(NumericCheck(value=1), "no digits here")
    assert not ok and "no number" in feedback


def test_numeric_tolerance_boundary() -> None:
    c = NumericCheck(value=10, tolerance=0.5)
    assert run_check(c, "9.5")[0]
    assert run_check(c, "10.5")[0]  # |10.5 - 10| == tolerance: passes
    assert not run_check(c, "10.75")[0]
    assert not run_check(c, "9.25")[0]
    assert not run_check(NumericCheck(value=10), "10.25")[0]  # default tolerance 0
    with pytest.raises(ValidationError):
        NumericCheck(value=1, tolerance=-1)


def test_numeric_with_json_path() -> None:
    c = NumericCheck(value=150, path="charge.amount", tolerance=0)
    assert run_check(c, '```json\n{"charge": {"amount": 150.0}}\n```')[0]
    assert run_check(c, '{"charge": {"amount": "150"}}')[0]  # numeric strings parse
    ok, feedback = run_check(c, '{"charge": {}}')
    assert not ok and "no number" in feedback
    assert not run_check(c, '{"charge": {"amount": "a lot"}}')[0]
    assert not run_check(c, '{"charge": {"amount": [150]}}')[0]


def test_llm_judge_is_not_a_local_check() -> None:
    with pytest.raises(TypeError, match="LLM judge"):
        run_check(LLMJudgeCheck(instructions="be nice"), "text")


def test_discriminated_union_parsing() -> None:
    assert isinstance(check(type="contains", value="x"), ContainsCheck)
    assert isinstance(check(type="llm_judge", instructions="x"), LLMJudgeCheck)
    assert check(type="regex", pattern="a", target="transcript").target == "transcript"
    for bad in ({"type": "startswith", "value": "x"},  # unknown type
                {"type": "contains", "value": "x", "extra": 1},  # unknown field
                {"type": "contains"},  # missing value
                {"type": "contains", "value": "x", "target": "everything"},
                {"value": "x"}):  # no type
        with pytest.raises(ValidationError):
            check(**bad)


def test_numeric_reads_thousands_separators_and_decimal_commas() -> None:
    assert run_check(NumericCheck(value=1000), "the fee is 1,000 USD")[0]
    assert run_check(NumericCheck(value=1234567.5), "total: 1,234,567.5")[0]
    assert run_check(NumericCheck(value=2.5), "2,5 kg")[0]
    assert not run_check(NumericCheck(value=1.0), "the fee is 1,000 USD")[0]


def test_json_field_found_in_a_fenced_block_after_prose() -> None:
    answer = 'Here is the result:\n```json\n{"refund": {"method": "original"}}\n```\nThanks.'
    assert run_check(JsonFieldEqualsCheck(path="refund.method", value="original"), answer)[0]


def test_a_deeply_nested_answer_is_no_json_not_a_crash() -> None:
    ok, feedback = run_check(JsonFieldEqualsCheck(path="a", value=1), "[" * 100_000)
    assert not ok and "no JSON field" in feedback
