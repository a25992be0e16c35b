"""Cases files (YAML, JSON, JSONL), every bad-input path, ListCaseLoader, example cases."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE

from expgit.core.checks import LLMJudgeCheck, RegexCheck, run_check
from expgit.core.domain import Case
from expgit.errors import InvalidInputError, NotFoundError, UsageError
from expgit.train.cases import ListCaseLoader, load_cases, parse_case
from expgit.train.context import PipelineContext
from expgit.train.interfaces import CaseLoader

YAML_LIST = """\
- name: bags-gold
  task_signature: checked-baggage
  input:
    user_query: How many bags are free?
  rubric:
    name: bags
    criteria:
      - name: three
        weight: 2
        check: {type: regex, pattern: '\\b3\\b'}
      - name: judged
        required: false
        check: {type: llm_judge, instructions: Be precise.}
      - name: env
- name: second
  input: Just a string
  rubric:
    criteria:
      - name: c
        check: {type: contains, value: x}
"""


def good_case(name: str = "c1", **extra: Any) -> dict[str, Any]:
    return {"name": name, "input": {"user_query": "q"},
            "rubric": {"criteria": [{"name": "k", "check": {"type": "contains", "value": "x"}}]},
            **extra}


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path, *parts: str) -> str:
    with pytest.raises(InvalidInputError) as info:
        load_cases(path)
    message = info.value.message
    for part in (str(path), *parts):
        assert part in message, f"{part!r} not in {message!r}"
    return message


# ------------------------------------------------------------------------------ loading
def test_yaml_list(tmp_path: Path) -> None:
    cases = load_cases(write(tmp_path, "cases.yaml", YAML_LIST))
    assert [c.name for c in cases] == ["bags-gold", "second"]
    first = cases[0]
    assert first.task_signature == "checked-baggage"
    assert first.input == {"user_query": "How many bags are free?"}
    three, judged, env = first.rubric.criteria
    assert isinstance(three.check, RegexCheck) and three.weight == 2 and three.required
    assert isinstance(judged.check, LLMJudgeCheck) and not judged.required
    assert env.check is None


def test_conveniences(tmp_path: Path) -> None:
    second = load_cases(write(tmp_path, "cases.yml", YAML_LIST))[1]
    assert second.task_signature == "second"  # defaults to the name
    assert second.input == {"user_query": "Just a string"}  # string input
    assert second.rubric.name == "second"  # rubric name defaults to the case name


def test_yaml_cases_mapping_and_json(tmp_path: Path) -> None:
    mapping = load_cases(write(tmp_path, "a.yaml", "cases:\n" + "\n".join(
        "  " + line for line in YAML_LIST.splitlines())))
    as_list = load_cases(write(tmp_path, "b.yaml", YAML_LIST))
    assert mapping == as_list
    as_json = load_cases(write(tmp_path, "c.json", json.dumps(
        {"cases": [c.model_dump() for c in as_list]})))
    assert as_json == as_list


def test_json_is_parsed_as_json(tmp_path: Path) -> None:
    text = json.dumps([good_case("a")], indent="\t")  # tabs: fine in JSON, not in YAML
    assert [c.name for c in load_cases(write(tmp_path, "cases.json", text))] == ["a"]
    refused(write(tmp_path, "bad.json", "[{'name': 1}]"), "not valid JSON")
    deep = "[" * 100_000 + "]" * 100_000  # past the depth bound: refused, no RecursionError
    refused(write(tmp_path, "deep.json", deep), "not valid JSON", "nested")
    refused(write(tmp_path, "deep.jsonl", deep + "\n"), "line 1", "not valid JSON", "nested")


def test_jsonl(tmp_path: Path) -> None:
    lines = [json.dumps(good_case("a")), "", "   ", json.dumps(good_case("b"))]
    cases = load_cases(write(tmp_path, "cases.jsonl", "\n".join(lines) + "\n"))
    assert [c.name for c in cases] == ["a", "b"]
    assert all(isinstance(c, Case) for c in cases)


def test_round_trip_of_dumped_cases(tmp_path: Path) -> None:
    cases = load_cases(EXAMPLE / "cases" / "train.yaml")
    path = write(tmp_path, "dump.jsonl", "".join(c.model_dump_json() + "\n" for c in cases))
    assert load_cases(path) == cases


# --------------------------------------------------------------------------- bad input
def test_missing_file_and_unknown_type(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="no such cases file"):
        load_cases(tmp_path / "nope.yaml")
    refused(write(tmp_path, "cases.txt", YAML_LIST), "unknown cases file type", ".txt")
    refused(write(tmp_path, "cases", YAML_LIST), "(none)")


def test_not_utf8(tmp_path: Path) -> None:
    refused(write(tmp_path, "cases.yaml", b"- name: \xff\xfe\n"), "not UTF-8", "byte 8")


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    refused(write(tmp_path, "cases.yaml", "- name: a\n  input: [unclosed\n"),
            "not valid YAML", "line")
    refused(write(tmp_path, "dup.yaml", "- name: a\n  name: b\n"), "duplicate key 'name'",
            "line 2")


@pytest.mark.parametrize("text, part", [
    ("just text", "top level must be a list"),
    ("{cases: 5}", "top level must be a list"),
    ("{cases: [], other: 1}", "unexpected: other"),
    ("", "top level must be a list"),
    ("[]", "contains no cases"),
    ("cases: []", "contains no cases"),
])
def test_bad_top_level(tmp_path: Path, text: str, part: str) -> None:
    refused(write(tmp_path, "cases.yaml", text), part)


def test_case_not_a_mapping(tmp_path: Path) -> None:
    refused(write(tmp_path, "cases.yaml", "- 5\n"), "case 0", "must be a mapping")


@pytest.mark.parametrize("case, parts", [
    ({"input": {}}, ["case 1:", "name: Field required", "rubric: Field required"]),
    (good_case("x", rubric=None), ["case 1 ('x')", "rubric"]),
    (good_case("x", surprise=1), ["case 1 ('x')", "surprise: Extra inputs"]),
    (good_case("x", input=5), ["case 1 ('x')", "input"]),
    ({**good_case("x"), "rubric": {"criteria": [
        {"name": "k", "check": {"type": "startswith", "value": "x"}}]}},
     ["case 1 ('x')", "rubric.criteria.0.check", "startswith"]),
    ({**good_case("x"), "rubric": {"criteria": [
        {"name": "k", "check": {"type": "regex", "pattern": "(oops"}}]}},
     ["rubric.criteria.0.check.regex.pattern", "invalid regular expression"]),
    ({**good_case("x"), "rubric": {"criteria": [{"name": "k", "weight": -1}]}},
     ["rubric.criteria.0.weight", "greater than or equal to 0"]),
    ({**good_case("x"), "rubric": {"criteria": []}},
     ["case 1 ('x')", "rubric.criteria: at least one criterion"]),
    ({**good_case("x"), "rubric": {"criteria": [{"name": "k"}, {"name": "k"}]}},
     ["duplicate criterion names 'k'"]),
    (good_case("  "), ["name: must not be empty"]),
])
def test_invalid_case_names_index_and_field(tmp_path: Path, case: dict[str, Any],
                                            parts: list[str]) -> None:
    path = write(tmp_path, "cases.json", json.dumps([good_case("ok"), case]))
    refused(path, *parts)


def test_many_problems_are_summarised(tmp_path: Path) -> None:
    criteria = [{"name": f"k{i}", "weight": -1} for i in range(10)]
    path = write(tmp_path, "cases.json", json.dumps([{**good_case(), "rubric": {
        "criteria": criteria}}]))
    assert "(4 more)" in refused(path)


def test_duplicate_case_names(tmp_path: Path) -> None:
    path = write(tmp_path, "cases.json", json.dumps([good_case("a"), good_case("b"),
                                                     good_case("a")]))
    refused(path, "case 2", "duplicate case name 'a'", "first at case 0")


def test_jsonl_errors_name_the_line(tmp_path: Path) -> None:
    refused(write(tmp_path, "a.jsonl", json.dumps(good_case()) + "\n{not json\n"),
            "line 2", "not valid JSON")
    refused(write(tmp_path, "b.jsonl", "\n" + json.dumps(good_case("z", extra=1)) + "\n"),
            "line 2 ('z')", "extra: Extra inputs")
    refused(write(tmp_path, "c.jsonl", json.dumps(good_case()) + "\n[1]\n"),
            "line 2", "must be a mapping")
    refused(write(tmp_path, "d.jsonl", "\n\n"), "contains no cases")
    refused(write(tmp_path, "e.jsonl", "".join(json.dumps(good_case()) + "\n"
                                               for _ in range(2))), "line 2", "duplicate")


# ------------------------------------------------------------------------------ loader
def collect(loader: ListCaseLoader) -> list[list[str]]:
    async def run() -> list[list[str]]:
        return [[c.name for c in batch] async for batch in loader.batches(PipelineContext())]
    return asyncio.run(run())


def test_list_case_loader_batches() -> None:
    cases = [parse_case(good_case(f"c{i}"), "test") for i in range(7)]
    loader: CaseLoader = ListCaseLoader(cases, 3)
    assert isinstance(loader, ListCaseLoader)
    assert collect(loader) == [["c0", "c1", "c2"], ["c3", "c4", "c5"], ["c6"]]
    assert collect(loader) == collect(loader)  # every call yields every case once
    assert collect(ListCaseLoader(cases, 7)) == [[f"c{i}" for i in range(7)]]
    assert collect(ListCaseLoader(cases, 100)) == [[f"c{i}" for i in range(7)]]
    assert collect(ListCaseLoader([], 3)) == []  # no cases: no (empty) batch
    for size in (0, -1):
        with pytest.raises(UsageError, match="batch size"):
            ListCaseLoader(cases, size)


def test_list_case_loader_batches_a_case_file(tmp_path: Path) -> None:
    loader = ListCaseLoader(load_cases(EXAMPLE / "cases" / "eval.yaml"), 4)
    assert [len(b) for b in collect(loader)] == [4, 3]
    with pytest.raises(InvalidInputError):
        load_cases(write(tmp_path, "bad.yaml", "- 1\n"))


# ------------------------------------------------------------------------ example cases
# A reply that follows the experiences, per example case: it must pass every criterion
# (so the rubrics are satisfiable); a careless reply must fail every case.
REFERENCE = {
    "cancel-basic-economy-no-insurance": "I'm sorry, but this basic economy reservation "
    "cannot be cancelled: it was booked more than 24 hours ago and has no travel insurance.",
    "cancel-business-change-of-plan": "Yes, business class reservations are eligible for "
    "cancellation. The refund goes back to the original payment method. Shall I proceed? "
    "Please reply yes to confirm.",
    "cancel-insured-change-of-plan": "Unfortunately the insurance does not cover a change "
    "of plans, only health or weather reasons, so this ticket cannot be cancelled.",
    "bags-gold-economy": "As a gold member in economy you get 3 free checked bags; each "
    "extra bag costs $50, so a fifth bag would be 50 USD.",
    "bags-remove-for-refund": "I'm sorry, checked bags can be added but not removed, so I "
    "can't refund them.",
    "change-basic-economy-date": "Basic economy flights cannot be modified. You can still "
    "change the cabin on the same flights.",
    "change-destination": "I can't do that: a change must keep the same origin, destination "
    "and trip type.",
    "certificate-instead-of-refund": "I'm afraid a certificate is not possible: refunds go "
    "back to the original payment method.",
    "add-bag-without-user-id": "Happy to help. First, could you give me your user ID?",
    "upset-user-demands-human": "I understand. Basic economy tickets booked more than 24 "
    "hours ago without insurance cannot be cancelled.",
    "eval-cancel-within-24-hours": "Yes, it was booked within 24 hours, so it is eligible "
    "for cancellation.",
    "eval-cancel-insured-weather": "Yes: your travel insurance covers weather, so you can "
    "cancel.",
    "eval-cancel-basic-economy-weather-uninsured": "Sorry, without insurance a basic economy "
    "ticket booked five days ago cannot be cancelled, even for weather.",
    "eval-bags-silver-basic-economy": "You get 1 free checked bag; the 2 extra bags are "
    "$50 each, so you pay $100.",
    "eval-bags-regular-business": "Business class includes 2 free checked bags; extra bags "
    "are 50 USD each.",
    "eval-cheaper-change-as-certificate": "A travel certificate is not possible; the "
    "difference goes to a credit card or gift card in your profile.",
    "eval-cancel-for-a-friend": "I can only act for the booking user: please have John give "
    "me his user id.",
}
CARELESS = "Sure! Done: your reservation has been cancelled and the bags have been removed."


def example_cases() -> list[Case]:
    return load_cases(EXAMPLE / "cases" / "train.yaml") + load_cases(
        EXAMPLE / "cases" / "eval.yaml")


def test_example_case_files_shape() -> None:
    train = load_cases(EXAMPLE / "cases" / "train.yaml")
    evals = load_cases(EXAMPLE / "cases" / "eval.yaml")
    assert 8 <= len(train) <= 10 and 6 <= len(evals) <= 8
    judged = [c for c in train for k in c.rubric.criteria if isinstance(k.check, LLMJudgeCheck)]
    assert len(judged) <= 1
    assert not [k for c in evals for k in c.rubric.criteria
                if k.check is None or isinstance(k.check, LLMJudgeCheck)]
    assert not {c.name for c in train} & {c.name for c in evals}
    assert all(isinstance(c.input.get("user_query"), str) for c in train + evals)


@pytest.mark.parametrize("case", example_cases(), ids=lambda c: c.name)
def test_example_rubrics_pass_a_good_reply_and_fail_a_careless_one(case: Case) -> None:
    for criterion in case.rubric.criteria:
        if criterion.check is None or isinstance(criterion.check, LLMJudgeCheck):
            continue
        ok, feedback = run_check(criterion.check, REFERENCE[case.name])
        assert ok, f"{criterion.name}: {feedback}"
    required = [k for k in case.rubric.criteria if k.required and k.check is not None
                and not isinstance(k.check, LLMJudgeCheck)]
    assert not all(run_check(k.check, CARELESS)[0] for k in required if k.check)


def test_a_date_in_a_cases_metadata_loads_as_its_json_text(tmp_path: Path) -> None:
    """Free metadata holds JSON: a YAML date becomes the text the wire would carry."""
    path = tmp_path / "cases.yaml"
    path.write_text("- name: dated\n  task_signature: t\n  metadata: {since: 2024-01-31}\n"
                    "  rubric: {name: r, criteria: [{name: c}]}\n")
    assert load_cases(path)[0].metadata == {"since": "2024-01-31"}
