"""``expgit eval`` with the agent's tools from an MCP server (tests/mcp_counter_server.py,
built with the mcp SDK): over stdio (one process per rollout) and streamable HTTP (one
shared server, rollouts kept apart by the state key), through the real CLI and the
openai adapter against the local script server. A server that dies, does not start,
writes garbage or hangs ends its rollout with the cause (exit 7); an over-long result is
cut with the marker; a missing SDK is exit 2 naming the install command."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import git
from tool_support import call, last_role, turn

from expgit.errors import EXIT_OK, EXIT_RUN_ERRORS, EXIT_USAGE
from expgit.llm.port import ToolMessages, ToolTurn
from expgit.llm.scripted import Step

SERVER = Path(__file__).resolve().parent.parent / "mcp_counter_server.py"
ADD = re.compile(r"Add (\d+) and (\d+)")


def agent(messages: ToolMessages) -> ToolTurn:
    """Adds the user's two numbers, asks for the total, and says it."""
    if last_role(messages) == "user":
        a, b = ADD.search(str(messages[-1]["content"])).groups()  # type: ignore[union-attr]
        return turn(call("add", "a1", amount=int(a)), call("add", "a2", amount=int(b)))
    if messages[-1].get("tool_call_id") != "t":
        return turn(call("total", "t"))
    return turn(text=f"Your total is {messages[-1]['content']}.")


def cases_file(folder: Path, sums: dict[str, tuple[int, int]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": [
        {"name": name, "input": {"user_turns": [f"Add {a} and {b}."]},
         "rubric": {"criteria": [{"name": "total", "check": {
             "type": "contains", "value": f"Your total is {a + b}."}}]}}
        for name, (a, b) in sums.items()]}))
    return path


def set_mcp(repo: Path, **options: Any) -> None:
    """``[agent.mcp]`` in the committed expgit.toml."""
    toml = repo / "expgit.toml"
    lines = [f"{key} = {json.dumps(value)}" for key, value in options.items()]
    toml.write_text(toml.read_text() + "\n[agent.mcp]\n" + "\n".join(lines) + "\n")
    git(repo, "commit", "-q", "-am", "mcp settings of the test")


def stdio(mode: str = "normal") -> str:
    return f"{sys.executable} {SERVER} {mode}"


def run_eval(run_cli: Any, repo: Path, cases: Path, url: str, *extra: str | Path) -> Any:
    return run_cli("-C", repo, "eval", "--cases", cases, "--llm", "openai", "--base-url",
                   url, "--json", *extra)


@pytest.mark.slow
def test_stdio_tools_pass_the_rubric_and_the_model_never_sees_the_state_key(
        run_cli: Any, serve: Any, seeded_repo: Any, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    set_mcp(repo, state_key_argument="state_key", command="unused")
    cases = cases_file(tmp_path / "cases", {"two-three": (2, 3), "ten-twenty": (10, 20)})
    server = serve([Step("rollout", agent) for _ in range(6)])
    result = run_eval(run_cli, repo, cases, server.url, "--mcp-command", stdio())
    assert result.code == EXIT_OK, result.err
    [phase] = json.loads(result.out)["phases"]
    assert phase["passed"] == 2, phase
    server.chat.assert_done()
    tools = server.chat.calls[0][2]["tools"]
    assert sorted(t["function"]["name"] for t in tools) == ["add", "shout", "total"]
    assert all("state_key" not in json.dumps(t) for t in tools)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server() -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen([sys.executable, str(SERVER), "--http", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, "the HTTP MCP server exited"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.slow
def test_concurrent_rollouts_on_one_http_server_keep_their_state_apart(
        run_cli: Any, serve: Any, seeded_repo: Any, tmp_path: Path,
        http_server: str) -> None:
    repo = tmp_path / "repo"
    set_mcp(repo, url=http_server, state_key_argument="state_key")
    sums = {f"case-{i}": (i, 100) for i in range(4)}
    cases = cases_file(tmp_path / "cases", sums)
    server = serve([Step("rollout", agent) for _ in range(3 * len(sums))])
    result = run_eval(run_cli, repo, cases, server.url, "--concurrency", "4")
    assert result.code == EXIT_OK, result.err
    [phase] = json.loads(result.out)["phases"]
    assert phase["passed"] == len(sums), phase  # one shared counter would sum them all


@pytest.mark.parametrize("command, cause", [
    (stdio("die"), "Connection closed; its stderr ends: counter server: dying on purpose"),
    (stdio("garbage"), "malformed JSON-RPC from the server"),
    (stdio("hang"), "no answer within 2s ([agent.mcp] call_timeout_seconds)"),
    ("/no/such/mcp-server --flag", "did not start: FileNotFoundError"),
])
@pytest.mark.slow
def test_a_broken_server_ends_its_rollout_with_the_cause_and_the_run_exits_7(
        run_cli: Any, serve: Any, seeded_repo: Any, tmp_path: Path, command: str,
        cause: str) -> None:
    repo = tmp_path / "repo"
    set_mcp(repo, command="unused", state_key_argument="state_key",
            call_timeout_seconds=2)
    cases = cases_file(tmp_path / "cases", {"two-three": (2, 3)})
    server = serve([Step("rollout", agent) for _ in range(3)])
    report = tmp_path / "run.json"
    result = run_eval(run_cli, repo, cases, server.url, "--mcp-command", command,
                      "--report", report)
    assert result.code == EXIT_RUN_ERRORS, (result.out, result.err)
    [rollout] = json.loads(report.read_text())["phases"][0]["rollouts"]
    assert rollout["error"].startswith("rollout failed: ToolServerError: the MCP server")
    assert cause in rollout["error"]


@pytest.mark.slow
def test_an_overlong_result_is_cut_with_the_marker(
        run_cli: Any, serve: Any, seeded_repo: Any, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    toml = repo / "expgit.toml"
    toml.write_text(toml.read_text() + "\n[limits]\nmax_message_chars = 500\n")
    set_mcp(repo, command=sys.executable, args=[str(SERVER)],
            state_key_argument="state_key")

    def shouting(messages: ToolMessages) -> ToolTurn:
        if last_role(messages) == "user":
            return turn(call("shout", "s", chars=5000))
        return turn(text="Done.")

    cases = tmp_path / "cases.yaml"
    cases.write_text(yaml.safe_dump({"cases": [{
        "name": "shout", "input": {"user_turns": ["Shout."]},
        "rubric": {"criteria": [{"name": "done", "check": {"type": "contains",
                                                           "value": "Done"}}]}}]}))
    server = serve([Step("rollout", shouting) for _ in range(2)])
    result = run_eval(run_cli, repo, cases, server.url)
    assert result.code == EXIT_OK, result.err
    [seen] = [m["content"] for m in server.chat.calls[1][1] if m["role"] == "tool"]
    assert len(seen) < 1000 and "characters removed" in seen and seen.startswith("AAA")


def test_without_the_sdk_the_error_names_the_install_command(
        run_cli: Any, serve: Any, seeded_repo: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp -> ImportError
    cases = cases_file(tmp_path / "cases", {"two-three": (2, 3)})
    server = serve([])
    refs = git(tmp_path / "repo", "for-each-ref")
    result = run_eval(run_cli, tmp_path / "repo", cases, server.url,
                      "--mcp-command", stdio())
    assert result.code == EXIT_USAGE
    assert "pip install 'expgit[mcp]'" in result.err
    assert server.chat.calls == [] and git(tmp_path / "repo", "for-each-ref") == refs
