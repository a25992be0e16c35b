"""``expgit mcp`` over stdio, driven by the mcp SDK's own client in a subprocess."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import run_expgit
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent, TextResourceContents

from expgit.store.repository import ExperienceRepository

BAGS = "checked-baggage-allowance"


def text_of(content: object) -> str:
    """The text of an MCP content block or resource that must be text."""
    assert isinstance(content, TextContent | TextResourceContents), content
    return content.text


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data = result.structured_content
    if data is None:
        data = json.loads(result.content[0].text)
    return data.get("result", data) if set(data) == {"result"} else data  # type: ignore[no-any-return]


async def session_run(repo: Path) -> dict[str, Any]:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "expgit", "-C", str(repo), "mcp"])
    seen: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        seen["tools"] = sorted(t.name for t in tools.tools)
        seen["search"] = structured(await session.call_tool(
            "search_experiences", {"query": "How many checked bags are free?", "top_k": 2}))
        seen["get"] = structured(await session.call_tool("get_experience", {"name": BAGS}))
        args = {"target_kind": "experience", "target": BAGS, "verdict": "helpful",
                "reason": "it answered the bag question", "idempotency_key": "mcp-1"}
        seen["report"] = structured(await session.call_tool("report_outcome", args))
        seen["repeat"] = structured(await session.call_tool("report_outcome", args))
        errors: list[tuple[str, object, str]] = []
        for name, bad in (("search_experiences", {"query": "x", "top_k": -1}),
                          ("get_experience", {"name": "no-such-experience"}),
                          ("report_outcome", {**args, "target": "no-such-experience",
                                              "idempotency_key": "mcp-2"})):
            try:
                result = await session.call_tool(name, bad)
                errors.append(("result", result.is_error, text_of(result.content[0])))
            except MCPError as exc:
                errors.append(("jsonrpc", exc.code, exc.message))
        wrong_type = await session.call_tool("search_experiences", {"query": 3, "top_k": "x"})
        seen["wrong_type"] = wrong_type.is_error
        seen["errors"] = errors
        seen["after_errors"] = structured(await session.call_tool(
            "search_experiences", {"query": "cancel basic economy", "top_k": 1}))
        resources = await session.list_resources()
        seen["resources"] = sorted(str(r.uri) for r in resources.resources)
        resource = await session.read_resource(f"experience://{BAGS}")
        seen["resource_text"] = text_of(resource.contents[0])
        index = await session.read_resource("experience://index")
        seen["index"] = json.loads(text_of(index.contents[0]))
        try:
            await session.read_resource("experience://no-such-experience")
            seen["missing_resource"] = None
        except MCPError as exc:
            seen["missing_resource"] = exc.code
    return seen


@pytest.mark.slow
def test_mcp_server_over_stdio(seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    main_before = seeded_repo.main_commit()
    seen = asyncio.run(session_run(repo))
    assert seen["tools"] == ["get_experience", "report_outcome", "search_experiences"]
    search = seen["search"]
    assert search["experiences"][0]["name"] == BAGS
    assert len(search["experiences"]) == 2 and search["commit"] == main_before
    assert search["experiences"][0]["reason"].startswith("rank 1 (bm25 score")
    assert f'<experience name="{BAGS}">' in search["markdown"]
    assert seen["get"]["name"] == BAGS and seen["get"]["content"].startswith("---\n")
    report, repeat = seen["report"], seen["repeat"]
    assert report["created"] is True and repeat["created"] is False
    assert repeat["outcome"] == report["outcome"]
    assert report["outcome"]["score"] == 1.0 and report["outcome"]["source"] == "mcp"
    for kind, code, message in seen["errors"]:
        assert (kind, code) == ("jsonrpc", -32602), (kind, code, message)
    assert "top_k must be 0 or more" in seen["errors"][0][2]
    assert "no-such-experience" in seen["errors"][1][2]
    assert seen["wrong_type"] is True  # the SDK's own argument validation
    assert [e["name"] for e in seen["after_errors"]["experiences"]] == [
        "cancellation-eligibility-rules"]  # still serving
    names = {e["name"] for e in seen["index"]["experiences"]}
    assert f"experience://{BAGS}" in seen["resources"] and "experience://index" in \
        seen["resources"]
    assert len(seen["resources"]) == len(names) + 1 and BAGS in names
    assert "free" in seen["resource_text"].lower()
    assert seen["missing_resource"] is not None
    listed = run_expgit("-C", repo, "outcomes", "list", "--json")
    outcomes = json.loads(listed.stdout)["outcomes"]
    assert [(o["target_id"], o["idempotency_key"]) for o in outcomes] == [(BAGS, "mcp-1")]
    assert seeded_repo.main_commit() == main_before  # never writes to main


def test_mcp_outside_a_repository_fails_at_once(tmp_path: Path) -> None:
    result = run_expgit("-C", tmp_path, "mcp")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "not a git repository" in result.stderr and result.stdout == ""
