"""The degeneracy guard (issue 24 item 3) on text: every sample of junk the embedded model
really wrote (tests/fixtures/degenerate/) is dropped with its cause, and good text (the
example experiences, the demo edits, good rationales and analyses) always passes, so
the guard is not a filter that drops everything."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EXAMPLE, ROOT, example_flat
from scripted_pipeline import analyze, edit_reply

from expgit.store.format.experience import parse_experience
from expgit.train.components.llm_fields import (
    LOCAL_ANALYSIS_LIMITS,
    LOCAL_EDIT_LIMITS,
    clip,
    compose_experience,
)
from expgit.train.components.llm_outputs import analyze_output, estimate_output
from expgit.train.components.trajectory_analyzer import without_junk
from expgit.train.guards.degeneracy import headings_of, problem, run_account, summary_problem
from expgit.train.guards.lesson import (
    LessonRefused,
    check_written,
    headings_shown,
    prompt_echoes,
    written_problem,
)

FIXTURES = ROOT / "tests" / "fixtures" / "degenerate"
JUNK: list[dict[str, Any]] = yaml.safe_load((FIXTURES / "junk.yaml").read_text())
REPLIES = [json.loads(line) for line in
           (FIXTURES / "smollm2_replies.jsonl").read_text().splitlines()]
GOOD_FILES = sorted(p for p in EXAMPLE.glob("*/*/SKILL.md")
                    if p.parent.parent.name in ("skills", "demo"))
GOOD_RATIONALES = [
    *re.findall(r'--rationale "([^"]+)"', (ROOT / "scripts" / "run_example.sh").read_text()),
    "Refunds to gift cards were promised in 5 days",  # the README's
    "learned about checked-baggage-allowance",  # the scripted pipeline's
    "Agents got this wrong.\n\nTwice.",
    "The run showed the agent counting bags per reservation; the rule says per passenger.",
]
OK_RATIONALE = GOOD_RATIONALES[0]
EDIT_FIELDS = ("rationale", "summary", "body")


def verdict(field: str, text: str, shown: list[str] | None = None) -> str | None:
    """The guard's message for ``text`` written in ``field`` with the example experiences
    ``shown`` in the prompt, None if it passes: an edit's field through the edit check, a
    trajectory's through the analysis rule."""
    headings = headings_shown(example_flat(name)
                              for name in shown or [])
    if field not in EDIT_FIELDS:
        return written_problem(field, text, prose=field == "line", shown=headings)
    fields = {"rationale": OK_RATIONALE, "summary": "", "body": ""} | {field: text}
    try:
        check_written(**fields, shown=headings)
    except LessonRefused as exc:
        assert exc.kind == "degenerate"
        return exc.message
    return None


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


RECORDED = {s for reply in REPLIES for s in strings(json.loads(reply["text"]))}


# ---------------------------------------------------------------------- the junk corpus
def test_the_corpus_is_what_the_embedded_model_wrote() -> None:
    assert len(REPLIES) >= 10
    assert {r["stage"] for r in REPLIES} >= {"analyze", "estimate", "reflect", "merge"}
    quoted = [s for s in JUNK if s["text"] not in ("Mia Li, Mia Li, Mia Li, …", "1.2.3.5.0")]
    assert len(quoted) >= 12
    assert [s["text"] for s in quoted if s["text"] not in RECORDED] == []


@pytest.mark.parametrize("sample", JUNK, ids=[f"{s['field']}-{i}" for i, s in enumerate(JUNK)])
def test_every_junk_sample_is_dropped_with_its_cause(sample: dict[str, Any]) -> None:
    message = verdict(sample["field"], sample["text"], sample.get("shown"))
    assert message is not None, sample
    assert sample["cause"] in message, (message, sample["cause"])


def test_the_recorded_confidences_are_clamped_to_one() -> None:
    edits = [e for r in REPLIES if r["stage"] == "estimate"
             for e in json.loads(r["text"])["edits"]]
    assert max(e["confidence"] for e in edits) > 1  # SmolLM2 wrote 1.5, 9.7 and 10
    output = estimate_output(LOCAL_EDIT_LIMITS)
    parsed = [output.model_validate({"edits": [e]}).edits[0] for e in edits]
    assert all(0 <= e.confidence <= 1 for e in parsed)
    assert [e.confidence for e in parsed if e.confidence == 1]  # 1.5 and 10: clamped
    low = estimate_output(LOCAL_EDIT_LIMITS).model_validate(
        {"edits": [{**edits[0], "confidence": -3}]})
    assert low.edits[0].confidence == 0


def test_the_recorded_analyses_lose_their_junk_lines() -> None:
    output = analyze_output(LOCAL_ANALYSIS_LIMITS)
    analyses = [output.model_validate(json.loads(r["text"])) for r in REPLIES
                if r["stage"] == "analyze"]
    dropped = {"degenerate": 0}
    kept = [without_junk(a, dropped) for a in analyses]  # type: ignore[arg-type]
    assert dropped["degenerate"] >= 5
    # two of them have an anchor cut off inside a bracket: keywords still, so no recorded
    # analysis is junk as a whole for it (a looping or wordless one is: test_junk_guard)
    assert [why for _, why in kept if why is not None] == []
    assert sum(1 for a in analyses if "[" in a.retrieval_anchor
               and problem(a.retrieval_anchor, prose=False) is not None) >= 2
    for out, why in kept:
        if why is None:
            assert [line for field in ("key_steps", "mistakes", "lessons")
                    for line in getattr(out, field)
                    if written_problem("line", line) is not None] == []


# ---------------------------------------------------------------------- good text
@pytest.mark.parametrize("path", GOOD_FILES, ids=[f"{p.parent.parent.name}/{p.parent.name}"
                                                  for p in GOOD_FILES])
def test_the_example_experiences_and_demo_edits_pass(path: Path) -> None:
    exp = parse_experience(path.read_text(), str(path))
    check_written(rationale=OK_RATIONALE, summary=exp.front_matter.summary, body=exp.body)
    assert problem(exp.body, echoes=prompt_echoes()) is None


@pytest.mark.parametrize("rationale", GOOD_RATIONALES)
def test_good_rationales_pass(rationale: str) -> None:
    assert verdict("rationale", rationale, ["flight-change-rules"]) is None


DEMO_UPDATES = [p for p in GOOD_FILES if p.parent.parent.name == "demo"
                and (EXAMPLE / "skills" / p.parent.name / "SKILL.md").is_file()]


@pytest.mark.parametrize("path", DEMO_UPDATES, ids=[p.parent.name for p in DEMO_UPDATES])
def test_a_demo_update_passes_with_the_file_it_updates_shown(path: Path) -> None:
    exp = parse_experience(path.read_text(), str(path))
    current = example_flat(path.parent.name)
    check_written(rationale=OK_RATIONALE, summary=exp.front_matter.summary, body=exp.body,
                  shown=headings_shown([current]))


def test_the_scripted_analyses_and_edits_pass() -> None:
    for topic in ("my cat", "gold member"):
        reply = json.loads(analyze([{"role": "user", "content": topic}]))
        out, why = without_junk(analyze_output(LOCAL_ANALYSIS_LIMITS).model_validate(reply),
                                {"degenerate": 0})  # type: ignore[arg-type]
        assert why is None and out.lessons == reply["lessons"]
    edit = edit_reply("pets-in-cabin", "create", "# Pets\n\nWhen: a pet travels, ask.\n")
    check_written(rationale=str(edit["rationale"]), summary=str(edit["summary"]),
                  body=str(edit["body"]))


@pytest.mark.parametrize("text", [
    "| Tier | Economy |\n|------|---------|\n| gold | 3 |\n| silver | 2 |\n",
    "Procedure:\n1) Ask.\n2) Check.\n3) Act.\n",  # ")" without "(": a list, not a cut
    "Run:\n\n```sh\nexpgit train --cases cases.yaml\n```\n\nThen review it.\n",
    "- merged rule A\n- merged rule B\n",  # "A" is a label, not the article
    'Get an explicit "yes" before `cancel_reservation`.',
    "退款总是退回原支付方式。",
    "No, no: check the booking first. Then say no once.",
])
def test_good_text_near_the_rules_passes(text: str) -> None:
    assert problem(text, echoes=prompt_echoes()) is None


# ---------------------------------------------------------------------- each rule
@pytest.mark.parametrize(("text", "cause"), [
    ("1.2.3.5.0", "no real words"),
    ("--- ### 12", "no real words"),
    ("Mia Li, Mia Li, Mia Li", "loops: 'mia li' 3 times"),
    ("yes yes yes yes yes yes", "loops: 'yes' 6 times"),
    ("Check the booking first. Check the booking first.", "loops"),
    ("aaaaaaaaaaaaaaaaaaaaaaa", "loops: 'a'"),
    ("- Ask the user.\n- Check it.\n- Ask the user.\n- Ask the user.\n", "loops: the line"),
    ("## Transcript\n\n## Evaluation\n", "echoes the prompt's headings"),
    ("# <Title>\n\nWhen: <situation>\n\nProcedure:\n1.\n\nPitfalls:\n- \n", "echoes"),
    ("Refunds go back to the original…", "cut off (it ends with an ellipsis)"),
    ("Refunds go back to the original...", "cut off"),
    ("Run:\n```sh\nexpgit train\n", "cut off (inside a code fence)"),
    ("Call `get_user_details and then", "cut off (inside an inline code span)"),
    ("Check the tier (gold, silver or regular", "cut off (inside a parenthesis)"),
    ("Check the tier, the cabin,", "cut off (it ends on ',')"),
    ("Check the tier and the", "cut off (it ends on 'the')"),
])
def test_each_rule(text: str, cause: str) -> None:
    found = problem(text, echoes=prompt_echoes())
    assert found is not None and cause in found, found


def test_keywords_may_end_on_a_comma_but_not_on_an_article() -> None:
    assert problem("cancel reservation, refund,", prose=False) is None
    assert problem("cancel reservation refund the", prose=False) is not None
    assert problem("", prose=True) is None  # emptiness is not this guard's rule


def test_a_retrieval_anchor_is_junk_only_as_junk_not_for_a_cut_end() -> None:
    # the embedded model's anchors (recorded in a main job): keywords for retrieval that
    # no reviewer reads; a cut end still finds the case, a loop or no words do not
    assert problem("cancel basic economy (no insurance", keywords=True) is None
    assert problem("gold member checked bags for the", keywords=True) is None
    assert problem("gold member checked bags for the", prose=False) is not None
    assert problem("Mia Li Mia Li Mia Li Mia Li", keywords=True) is not None
    assert problem("1.2.3.5.0", keywords=True) is not None


def test_the_echoes_are_the_templates_headings() -> None:
    echoes = prompt_echoes()
    assert {"transcript", "rubric", "evaluation", "existing experiences most relevant to it",
            "current content of the target files"} <= echoes
    assert headings_of(["{# ## Not a heading #}\n## Case {{ case.name }} ({{ x }})\n"
                        "Rules:\nplain text\n"]) == {"case", "rules"}


@pytest.mark.parametrize("summary", [
    "The agent cancelled the reservation without checking eligibility.",
    "In this run the user wanted a refund to a gift card.",
    "Check the tier first. The user asked for 3 bags and got 2.",
    "The customer was told the flight could not be changed.",
])
def test_an_account_of_one_run_is_not_a_summary(summary: str) -> None:
    assert run_account(summary)
    found = summary_problem(summary)
    assert found is not None and "account of one run" in found


@pytest.mark.parametrize("summary", [
    "Cancel a reservation only when it was booked within 24 hours or the airline "
    "cancelled a flight.",
    "When the user asks to cancel, check eligibility before promising a refund.",
    "The agent must verify the user's identity before any change.",
    "Do not add free bags the user did not ask for.",
])
def test_a_rule_is_a_summary(summary: str) -> None:
    assert summary_problem(summary) is None


def test_a_long_text_is_clipped_after_a_sentence_not_with_an_ellipsis() -> None:
    text = " ".join(f"Check rule {i} first." for i in range(30))
    short = clip(text, 100)
    assert short.endswith(".") and 50 <= len(short) <= 100
    assert problem(short) is None
    word = clip("word " * 100, 50)
    assert word.endswith("…") and len(word) <= 50 and problem(word) is not None
    assert clip("short", 50) == "short"


def test_an_update_of_the_summary_keeps_the_flow_list_of_tags() -> None:
    current = example_flat("refund-method-rules").replace(  # tags as a flow list
        "tags:\n- refunds\n- payments\n- policy\n", "tags: [refunds, payments, policy]\n")
    assert "tags: [refunds, payments, policy]" in current
    new = compose_experience("refund-method-rules", current,
                             summary="Refund to the original payment methods.", tags=[],
                             body="", path="experiences/refund-method-rules.md")
    changed = [a for a, b in zip(current.splitlines(), new.splitlines(), strict=True)
               if a != b]
    assert len(changed) == 1 and changed[0].startswith("summary: ")
    assert "tags: [refunds, payments, policy]" in new


def test_a_trajectory_line_said_twice_is_kept_once() -> None:
    reply = {**json.loads(analyze([{"role": "user", "content": "gold member"}])),
             "mistakes": ["Guessed the booking.", "Guessed the booking."],
             "lessons": ["Guessed the booking.", "Ask which booking first."]}
    counts = {"degenerate": 0}
    out, why = without_junk(analyze_output(LOCAL_ANALYSIS_LIMITS).model_validate(reply),
                            counts)  # type: ignore[arg-type]
    assert why is None and counts == {"degenerate": 2}
    assert out.mistakes == ["Guessed the booking."]
    assert out.lessons == ["Ask which booking first."]
