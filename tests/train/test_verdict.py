"""What a training run learned, said plainly (expgit.train.reports.verdict), and the same lines
at the end of ``expgit train``'s output."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
from cli_support import agent, cases_file
from scripted_pipeline import BAGGAGE_CASE, edit_reply, reflect_with

from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository
from expgit.train.measurement.candidate import CandidateReport, EvalSummary
from expgit.train.reports.run_report import RunReport
from expgit.train.reports.verdict import (
    ENDPOINT_PLACEHOLDER,
    endpoint_command,
    learned,
    learned_line,
    verdict_lines,
)

LOCAL = "local SmolLM2-135M-Instruct at http://127.0.0.1:4242/v1"
ARGS = ("-C", "my repo", "train", "--cases", "t.yaml", "--llm", "local", "--model=x.gguf")


def run(llm: str = LOCAL, proposals: tuple[str, ...] = (),
        *deltas: tuple[int, int, float]) -> RunReport:
    """A train report; each delta (baseline passed, candidate passed, the lower end of
    the delta's interval) of 4 cases, for the first proposals."""
    candidates = [CandidateReport(proposal=pid, baseline=EvalSummary(cases=4, passed=b),
                                  candidate=EvalSummary(cases=4, passed=c),
                                  delta=(c - b) / 4, delta_ci=[low, 1.0])
                  for pid, (b, c, low) in zip(proposals, deltas, strict=False)]
    return RunReport(command="train", repository="r", llm=llm, proposals=list(proposals),
                     candidates=candidates)


def test_no_proposal_from_the_embedded_model_says_so_and_how_to_use_an_endpoint() -> None:
    lines = verdict_lines(run(), ARGS)
    assert lines[0].startswith("learned: nothing. The run made no proposal")
    assert "capable model" in lines[1] and "SmolLM2-135M" in lines[1]
    command = shlex.split(lines[-1])
    assert command == ["expgit", "-C", "my repo", "train", "--cases", "t.yaml",
                       "--base-url", ENDPOINT_PLACEHOLDER, "--model", "MODEL"]


def test_a_proposal_that_does_not_beat_main_learned_nothing() -> None:
    report = run(LOCAL, ("p1", "p2"), (1, 1, -0.1), (2, 1, -0.6))
    assert learned(report) is False
    lines = verdict_lines(report, ARGS)
    assert lines[0] == ("learned: nothing. No proposal did better than main on the "
                        "held-out cases (best delta +0.00pp)")
    assert "--base-url" in lines[-1]
    assert learned_line(run(LOCAL, ("p1",), (2, 1, -0.7))) == (
        "learned: nothing. Every proposal did worse than main on the held-out cases "
        "(best delta -25.00pp)")


def test_a_proposal_that_beats_main_is_named_with_its_figures() -> None:
    report = run(LOCAL, ("p1", "p2"), (1, 1, 0.0), (1, 3, 0.1))
    assert learned(report) is True
    assert verdict_lines(report, ARGS) == [
        "learned: proposal p2 passes 3/4 held-out cases where main passes 1/4 (+50.00pp, "
        "95% interval +10.00 to +100.00)"]


def test_a_gain_within_chance_is_not_called_learned() -> None:
    """One flip out of two cases (measured: a 135M model's junk edit did this) is a
    positive delta whose interval holds 0."""
    report = run(LOCAL, ("p1",), (0, 2, -0.2))
    assert learned(report) is False
    lines = verdict_lines(report, ARGS)
    assert lines[0] == (
        "learned: nothing shown. The proposal p1 passes 2/4 held-out cases where main "
        "passes 0/4 (+50.00pp, 95% interval -20.00 to +100.00): the interval holds no "
        "change, too few cases to tell a lesson from chance")
    assert "capable model" in lines[1] and "--base-url" in lines[-1]


def test_unmeasured_proposals_are_not_called_a_success_or_a_failure() -> None:
    report = run(LOCAL, ("p1",))
    assert learned(report) is None
    assert verdict_lines(report, ARGS) == [
        "learned: not measured (no held-out cases measured the proposals: `train "
        "--eval-cases FILE`, or `apply ID --gate --eval-cases FILE`)"]


def test_an_endpoint_gets_the_plain_verdict_only_and_an_eval_none() -> None:
    assert verdict_lines(run("gpt-4o-mini at api.openai.com"), ARGS) == [
        verdict_lines(run(), ARGS)[0]]
    assert verdict_lines(RunReport(command="eval", repository="r", llm=LOCAL), ARGS) == []


def test_endpoint_command_replaces_every_model_option() -> None:
    assert endpoint_command(["train", "--llm=local", "--base-url", "u", "--model", "m",
                             "--epochs", "2"]) == (
        f"expgit train --epochs 2 --base-url {ENDPOINT_PLACEHOLDER} --model MODEL")


@pytest.mark.slow
def test_train_prints_the_verdict_before_the_cost_table(run_cli: Any, serve: Any,
                                       seeded_repo: ExperienceRepository,
                                       tmp_path: Path) -> None:
    """A run whose only edit is refused (no gradient, no proposal) says that it learned
    nothing; the endpoint's run gets no advice to use an endpoint."""
    server = serve([Step("rollout", agent),
                    Step("reflect", reflect_with(edit_reply("no-such-lesson", "delete", "")))])
    result = run_cli("-C", tmp_path / "repo", "train", "--cases",
                     cases_file(tmp_path / "t.yaml", BAGGAGE_CASE), "--llm", "openai",
                     "--base-url", server.url)
    assert result.code == 0, result.err
    server.chat.assert_done()
    lines = result.out.splitlines()
    at = lines.index("LLM usage:")
    assert lines[at - 3:at] == ["", "learned: nothing. The run made no proposal: no edit the "
                                "model wrote survived (the rejected edits and failed calls "
                                "above say why)", ""]


def test_a_gate_refusal_says_lowered_only_when_the_eval_went_down() -> None:
    # the main job's proposals usually change nothing: a 0 delta under --min-delta 1 did
    # not lower the eval, it failed the gate; -1 case did lower it
    from expgit.train.measurement.candidate import GateResult, gate_refusal

    flat, worse = run(LOCAL, ("aaaa", "bbbb"), (0, 0, 0.0), (1, 0, -0.5)).candidates
    for report, delta in ((flat, "+0.00"), (worse, "-25.00")):
        report.gate = GateResult(checked=True, passed=False,
                                 reason=f"delta {delta}pp is below the minimum +1.00pp")
    assert gate_refusal(flat).startswith("gate: proposal aaaa failed the gate: delta +0.00pp")
    assert gate_refusal(worse).startswith("gate: proposal bbbb lowered the eval: delta -25")
    undecided = flat.model_copy(update={"gate": GateResult(checked=True, passed=None,
                                                           reason="could not be decided")})
    assert gate_refusal(undecided) == "gate: proposal aaaa: could not be decided"
