"""Listing mode (``[agent] skills = "listing"``, the default of the tool-calling agent in
the skills layout), through the real CLI and the openai adapter against the strict
script server: the system prompt holds ``<available_skills>`` within its budget, the
agent reads a skill only through the ``Skill`` tool, the run report counts the load
(reach), and a ``Skill`` call of an unknown name is an error the agent sees."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from conftest import git
from skill_listing_support import (
    ASK,
    BAGGAGE,
    DESCRIPTION,
    MARKER,
    OTHER,
    TRIGGERS,
    bag_cases,
    listing_agent,
    report_of,
    rollout_requests,
    skills_repo,
)
from skills_support import REFUND

from expgit.init import init_repository
from expgit.llm.scripted import Step
from expgit.store.format.experience import estimate_tokens


def run_eval(run_cli: Any, repo: Path, cases: Path, server: Any, *extra: str | Path) -> Any:
    return run_cli("-C", repo, "eval", "--cases", cases, "--llm", "openai", "--base-url",
                   server.url, *extra)


def listing_of(system: str) -> str:
    start = system.index("<available_skills>")
    end = system.index("</available_skills>") + len("</available_skills>")
    return system[start:end]


def test_the_agent_loads_a_skill_only_through_the_skill_tool_and_reach_counts_it(
        run_cli: Any, serve: Any, tmp_path: Path) -> None:
    repo = skills_repo(tmp_path)
    cases = bag_cases(tmp_path / "cases", ASK)
    server = serve([Step("rollout", listing_agent) for _ in range(3)])
    report = tmp_path / "report.json"
    page = tmp_path / "report.html"
    result = run_eval(run_cli, repo, cases, server, "--report", report, "--report-html", page)
    assert result.code == 0, result.err
    assert server.unexpected == []
    server.chat.assert_done()
    first, second, _ = rollout_requests(server)
    system = str(first[1][0]["content"])
    # the always-on skill in full; the others listed, in the reference library's form
    assert "Refund to the original payment method" in system
    assert (f"<skill>\n<name>\n{BAGGAGE}\n</name>\n<description>\nUse when a user asks to "
            "change the checked bags of a reservation.\n</description>\n<location>\n"
            f"skills/{BAGGAGE}/SKILL.md\n</location>\n</skill>") in system
    assert f"<name>\n{REFUND}\n</name>" not in system  # always-on: not in the listing
    assert "Skill" in [t["function"]["name"] for t in first[2]["tools"]]  # type: ignore[index]
    skill_result = [m for m in second[1] if m["role"] == "tool"]
    assert len(skill_result) == 1 and MARKER in skill_result[0]["content"]
    data = report_of(report)
    [phase] = data["phases"]
    assert phase["passed"] == 1
    [summary] = phase["rollouts"]
    assert summary["skills_loaded"] == [BAGGAGE]
    assert sorted(summary["skills_listed"]) == [BAGGAGE, OTHER]
    reach = {r["skill"]: r for r in phase["skill_reach"]}
    assert reach[BAGGAGE]["loaded"] == 1 and reach[BAGGAGE]["rollouts"] == 1
    assert reach[BAGGAGE]["pass_rate_loaded"] == 1.0
    assert reach[OTHER]["loaded"] == 0 and reach[OTHER]["pass_rate_not_loaded"] == 1.0
    assert f"{BAGGAGE}: loaded in 1/1 rollouts; pass rate 100% when loaded" in result.out
    assert f'data-skill="{BAGGAGE}"' in page.read_text()


def test_two_rollouts_reach_counts_loaded_and_not_loaded(
        run_cli: Any, serve: Any, tmp_path: Path) -> None:
    repo = skills_repo(tmp_path)
    cases = bag_cases(tmp_path / "cases", ASK, "Hello, I want to talk about my bags.")
    # the second user's message does not match the agent's rule: it loads nothing

    def agent(messages: Any) -> Any:
        if "talk about" in str(messages[-1]["content"]):
            from tool_support import turn
            return turn(text="Sure, tell me more.")
        return listing_agent(messages)
    server = serve([Step("rollout", agent) for _ in range(4)])
    report = tmp_path / "report.json"
    result = run_eval(run_cli, repo, cases, server, "--report", report)
    assert result.code == 0, result.err
    reach = {r["skill"]: r for r in report_of(report)["phases"][0]["skill_reach"]}
    assert (reach[BAGGAGE]["loaded"], reach[BAGGAGE]["rollouts"]) == (1, 2)
    assert (reach[BAGGAGE]["pass_rate_loaded"], reach[BAGGAGE]["pass_rate_not_loaded"]) == (
        1.0, 0.0)


def test_an_unknown_skill_is_a_tool_error_and_the_rollout_goes_on(
        run_cli: Any, serve: Any, tmp_path: Path) -> None:
    repo = skills_repo(tmp_path)
    cases = bag_cases(tmp_path / "cases", ASK + " Then load skill no-such-skill")
    server = serve([Step("rollout", listing_agent) for _ in range(2)])
    report = tmp_path / "report.json"
    result = run_eval(run_cli, repo, cases, server, "--report", report)
    assert result.code == 0, result.err
    assert server.unexpected == []
    server.chat.assert_done()  # the agent saw the error and answered
    error = [m for m in rollout_requests(server)[1][1] if m["role"] == "tool"]
    assert "error: unknown skill 'no-such-skill'" in error[0]["content"]
    assert BAGGAGE in error[0]["content"]  # the error names the skills there are
    [summary] = report_of(report)["phases"][0]["rollouts"]
    assert summary["error"] is None and summary["passed"] is False
    assert summary["skills_loaded"] == []


def test_the_listing_stays_within_its_budget(run_cli: Any, serve: Any,
                                             tmp_path: Path) -> None:
    # 100 tokens cannot hold both entries with their descriptions (about 141): the last
    # one (by name) loses its own, and the listing fits
    repo = skills_repo(tmp_path, "[agent]\ncontext_window_tokens = 10000\n"
                                 "listing_budget_percent = 1.0\n")
    cases = bag_cases(tmp_path / "cases", ASK)
    server = serve([Step("rollout", listing_agent) for _ in range(3)])
    result = run_eval(run_cli, repo, cases, server)
    assert result.code == 0, result.err
    listing = listing_of(str(rollout_requests(server)[0][1][0]["content"]))
    assert estimate_tokens(listing) <= 100
    assert f"<name>\n{OTHER}\n</name>\n<description>\n\n</description>" in listing
    assert html.escape("Use when a user asks to change the checked bags") in listing


def test_retrieval_mode_and_a_flat_repository_keep_retrieval(
        run_cli: Any, serve: Any, tmp_path: Path) -> None:
    repo = skills_repo(tmp_path, '[agent]\nskills = "retrieval"\n')
    cases = bag_cases(tmp_path / "cases", ASK)

    def agent(messages: Any) -> Any:
        from tool_support import turn
        system = str(messages[0]["content"])
        assert "<available_skills>" not in system and MARKER in system
        return turn(text="ok")
    server = serve([Step("rollout", agent)])
    report = tmp_path / "report.json"
    result = run_eval(run_cli, repo, cases, server, "--report", report)
    assert result.code == 0, result.err
    assert server.unexpected == []
    extra = rollout_requests(server)[0][2]
    assert extra is not None
    tools = [t["function"]["name"] for t in extra["tools"]]
    assert "Skill" not in tools
    assert "skills_loaded" not in json.dumps(report_of(report)["phases"][0]["rollouts"][0]
                                             ) or report_of(report)["phases"][0][
        "rollouts"][0]["skills_loaded"] is None
    # "listing" in a flat repository is refused, naming the key; nothing is written
    flat = tmp_path / "flat"
    init_repository(flat)
    (tmp_path / "toml").write_text('experiences_root = "experiences"\n[agent]\n'
                                   'skills = "listing"\n')
    blob = git(flat, "hash-object", "-w", str(tmp_path / "toml")).strip()
    tree = git(flat, "mktree", input=f"100644 blob {blob}\texpgit.toml\n").strip()
    commit = git(flat, "commit-tree", tree, "-p", "main", "-m", "listing").strip()
    git(flat, "update-ref", "refs/heads/main", commit)
    refs = git(flat, "for-each-ref")
    result = run_cli("-C", flat, "eval", "--cases", cases, "--llm", "openai",
                     "--base-url", server.url)
    assert result.code == 5 and "agent.skills" in result.err, result.err
    assert git(flat, "for-each-ref") == refs


def test_a_skill_listed_but_not_loaded_gets_a_description_edit(
        run_cli: Any, serve: Any, tmp_path: Path) -> None:
    """The vague description hides the baggage rule: the agent does not load it and
    fails; the reflect prompt shows the listing and says the description may be the
    fault; the edit changes only the description, and the report counts it."""
    from scripted_pipeline import reflect_with, skill_reply

    repo = skills_repo(tmp_path, baggage_description="Notes.")
    cases = bag_cases(tmp_path / "cases", ASK)
    edit = skill_reply({"name": BAGGAGE, "action": "update",
                        "rationale": "the skill was not loaded", "summary": DESCRIPTION,
                        "tags": [], "body": "", "confidence": 0.8})
    merge = json.dumps({"items": [{**edit, "action": "upsert", "gradient_ids": []}]})
    server = serve([Step("rollout", listing_agent), Step("reflect", reflect_with(edit)),
                    Step("merge", merge)])
    report = tmp_path / "report.json"
    result = run_cli("-C", repo, "train", "--cases", cases, "--llm", "openai",
                     "--base-url", server.url, "--report", report)
    assert result.code == 0, result.err
    assert server.unexpected == []
    server.chat.assert_done()
    reflect_prompt = next(c[1] for c in server.chat.calls if c[0] == "reflect")
    text = "\n".join(str(m["content"]) for m in reflect_prompt)
    assert "<available_skills>" in text and f"Listed but not loaded: {BAGGAGE}" in text
    assert "the fault is that skill's description" in text
    assert "It loaded no skill." in text
    merge_prompt = "\n".join(str(m["content"]) for m in next(
        c[1] for c in server.chat.calls if c[0] == "merge"))
    # the merge prompt is given the listing budget (1% of 200,000) and told to fold
    assert "has a budget of about\n  2000 tokens" in merge_prompt
    assert "prefer folding a narrow skill into a\n  broader one" in merge_prompt
    phases = report_of(report)["phases"]
    assert sum(p["description_edits"] for p in phases) == 1
    assert "edits that change only a skill's description: 1" in result.out
    docs = [p for p in git(repo, "ls-tree", "-r", "--name-only", "expgit/trajectories"
                           ).split() if p.endswith(".md")]
    [doc] = docs
    front = git(repo, "show", f"expgit/trajectories:{doc}")
    assert f"skills_listed:\n- {BAGGAGE}\n- {OTHER}\nskills_loaded: []" in front
    [proposal] = report_of(report)["proposals"]
    shown = git(repo, "show", f"expgit/proposals/{proposal}:skills/{BAGGAGE}/SKILL.md")
    assert f"description: {DESCRIPTION}" in shown and MARKER in shown


def test_validate_prints_the_listing_size_and_warns_past_a_budget(
        run_cli: Any, tmp_path: Path) -> None:
    roomy = skills_repo(tmp_path / "a")
    result = run_cli("-C", roomy, "validate")
    assert result.code == 0, result.err
    lines = [line for line in result.out.splitlines() if line.startswith("skill listing")]
    assert [line.split(":")[0] for line in lines] == [
        "skill listing for claude-code", "skill listing for codex"]
    assert all(line.endswith("fits") for line in lines)
    assert "budget 2000 tokens" in lines[0] and "8000 characters" in lines[1]
    assert "warning" not in result.err
    # a 2,000-token window: 20 tokens for Claude Code, 40 for Codex; both are passed,
    # which is a warning, not a failure
    small = skills_repo(tmp_path / "b", "[agent]\ncontext_window_tokens = 2000\n")
    result = run_cli("-C", small, "validate", "--json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["valid"] is True
    assert [c["over"] for c in data["listing"]] == [True, True]
    assert "over claude-code's budget of 20 tokens" in result.err
    assert "over codex's budget of 40 tokens or 8000 characters" in result.err
    assert "fold narrow skills into broader ones" in result.err


def trigger_agent(messages: Any) -> Any:
    """Loads the baggage skill when the query says "bags" (not "luggage")."""
    from tool_support import call, turn
    assert "<available_skills>" in str(messages[0]["content"])
    if "bags" in str(messages[-1]["content"]):
        return turn(call("Skill", "s1", skill=BAGGAGE))
    return turn(text="Happy to help.")


def test_trigger_evals_report_the_trigger_rate(run_cli: Any, serve: Any,
                                               tmp_path: Path) -> None:
    repo = skills_repo(tmp_path, triggers=json.dumps(TRIGGERS))
    server = serve([Step("rollout", trigger_agent) for _ in range(6)])  # 3 queries x 2
    args = ("eval", "--skill", BAGGAGE, "--triggers", "--runs", "2", "--llm", "openai",
            "--base-url", server.url)
    result = run_cli("-C", repo, *args, "--json")
    assert result.code == 0, result.err
    assert server.unexpected == []
    server.chat.assert_done()
    data = json.loads(result.out)
    assert [(r["triggers"], r["runs"], r["trigger_rate"], r["passed"])
            for r in data["results"]] == [(2, 2, 1.0, True), (0, 2, 0.0, False),
                                          (0, 2, 0.0, True)]
    assert data["results"][0]["should_trigger"] is True
    assert (data["recall"], data["false_trigger_rate"], data["precision"]) == (
        0.5, 0.0, 1.0)
    assert data["passed"] == 2 and round(data["trigger_rate"], 3) == 0.333
    assert data["file"] == f"skills/{BAGGAGE}/evals/triggers.json"
    assert data["usage"]["by_stage"]["rollout"]["calls"] == 6
    server = serve([Step("rollout", trigger_agent) for _ in range(3)])
    text = run_cli("-C", repo, *args[:5], "1", "--llm", "openai", "--base-url", server.url)
    assert text.code == 0, text.err
    assert "queries passed: 2/3" in text.out and "50% triggered (recall)" in text.out
    assert "FAIL  0/1 (0%)  should trigger: I need more luggage" in text.out


def test_a_malformed_trigger_file_exits_5_before_any_call(run_cli: Any, serve: Any,
                                                          tmp_path: Path) -> None:
    repo = skills_repo(tmp_path, triggers=json.dumps(
        [TRIGGERS[0], {"query": "x", "should_trigger": "maybe"}]))
    server = serve([])
    result = run_cli("-C", repo, "eval", "--skill", BAGGAGE, "--triggers", "--llm",
                     "openai", "--base-url", server.url)
    assert result.code == 5, result.err
    assert f"skills/{BAGGAGE}/evals/triggers.json: query 1: should_trigger" in result.err
    result = run_cli("-C", repo, "eval", "--skill", OTHER, "--triggers", "--llm",
                     "openai", "--base-url", server.url)
    assert result.code == 5 and "no trigger eval file" in result.err, result.err
    assert server.requests == 0
