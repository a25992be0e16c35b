"""Session hub ingest throughput (run by hand; asserts nothing).

    python benchmarks/bench_sessions_ingest.py [--files 1000] [--rows 200]
                                               [--tool codex|claude-code|both]

Writes ``--files`` synthetic session files of about ``--rows`` rows each where the tool
keeps them (a Codex ``sessions/YYYY/MM/DD/rollout-*.jsonl`` tree; a Claude Code
``projects/<project>/<session>.jsonl`` tree, one in ten sessions with a sub-agent file),
then times ``expgit sessions ingest --from TOOL --path DIR`` in-process, without an LLM
(sessions stay pending; segmentation is not ingest's cost): the first ingest (every file
new: parse, redact, fingerprint, one commit), the second (nothing changed: no file
opened) and one after a tenth of the files grew by a turn. Prints milliseconds per row
and per file; the issue's bound is 2 ms per row for the first ingest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from expgit.init import init_repository
from expgit.sessions.ingest.discovery import Tool
from expgit.sessions.ingest.from_tools import ingest_from
from expgit.store.repository import ExperienceRepository

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["invoice", "refund", "ledger", "cents", "rounding", "report", "parser", "config",
         "deploy", "retry", "cache", "timeout", "schema", "migration", "index", "query",
         "test", "fixture", "branch", "merge", "release"]


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def codex_rows(rng: random.Random, session: str, rows: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"timestamp": "2026-11-30T09:00:00Z", "type": "session_meta",
         "payload": {"id": session, "cwd": "/home/dev/project", "cli_version": "0.63.0"}},
        {"timestamp": "2026-11-30T09:00:00Z", "type": "turn_context",
         "payload": {"model": "gpt-5-codex", "cwd": "/home/dev/project"}}]
    turn = 0
    while len(out) < rows:
        turn += 1
        ask = sentence(rng, 14)
        call = f"call_{session[:8]}_{turn}"
        out += [
            {"type": "response_item", "payload": {"type": "message", "role": "user",
                                                   "content": [{"type": "input_text",
                                                                "text": ask}]}},
            {"type": "event_msg", "payload": {"type": "user_message", "message": ask}},
            {"type": "response_item", "payload": {
                "type": "reasoning", "summary": [{"type": "summary_text",
                                                  "text": sentence(rng, 10)}],
                "encrypted_content": "gAAAA" + "x" * 200}},
            {"type": "response_item", "payload": {
                "type": "function_call", "name": "shell", "call_id": call,
                "arguments": json.dumps({"command": ["bash", "-lc", f"rg {rng.choice(WORDS)}"]})}},
            {"type": "response_item", "payload": {
                "type": "function_call_output", "call_id": call,
                "output": json.dumps({"output": "\n".join(sentence(rng, 8) for _ in range(6)),
                                      "metadata": {"exit_code": 0}})}},
            {"type": "event_msg", "payload": {"type": "token_count", "info": {}}},
            {"type": "response_item", "payload": {
                "type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": sentence(rng, 30)}]}},
            {"type": "event_msg", "payload": {"type": "agent_message", "message": "done"}},
        ]
    return out[:rows]


def claude_rows(rng: random.Random, session: str, rows: int, agent: str | None = None
                ) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parent: str | None = None
    turn = 0
    common = {"sessionId": session, "cwd": "/home/dev/project", "version": "2.0.0",
              "isSidechain": agent is not None, **({"agentId": agent} if agent else {})}
    while len(out) < rows:
        turn += 1
        tool = f"toolu_{session[:8]}_{turn}"
        for kind, message in (
                ("user", {"role": "user", "content": sentence(rng, 14)}),
                ("assistant", {"id": f"msg_{turn}a", "role": "assistant",
                               "model": "claude-sonnet-4-5", "content": [
                                   {"type": "text", "text": sentence(rng, 12)}]}),
                ("assistant", {"id": f"msg_{turn}a", "role": "assistant",
                               "model": "claude-sonnet-4-5", "content": [
                                   {"type": "tool_use", "id": tool, "name": "Grep",
                                    "input": {"pattern": rng.choice(WORDS)}}]}),
                ("user", {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": tool,
                     "content": "\n".join(sentence(rng, 8) for _ in range(6))}]}),
                ("assistant", {"id": f"msg_{turn}b", "role": "assistant",
                               "model": "claude-sonnet-4-5", "content": [
                                   {"type": "text", "text": sentence(rng, 30)}]})):
            uuid = f"{session[:8]}-{len(out)}"
            out.append({**common, "type": kind, "message": message, "uuid": uuid,
                        "parentUuid": parent, "timestamp": "2026-11-30T09:00:00Z"})
            parent = uuid
    return out[:rows]


def write(path: Path, rows: list[dict[str, Any]], mode: str = "w") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode) as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in rows))


def generate(tool: Tool, folder: Path, files: int, rows: int, seed: int) -> tuple[
        list[Path], int]:
    """Write the files; the paths of the sessions (not sub-agents), and the row total."""
    rng = random.Random(seed)
    sessions: list[Path] = []
    total = 0
    for i in range(files):
        session = f"{seed:04d}{i:04d}-aaaa-4bbb-8ccc-{rng.getrandbits(48):012x}"
        if tool == "codex":
            path = folder / "2026" / "11" / f"{1 + i % 28:02d}" / f"rollout-{session}.jsonl"
            data = codex_rows(rng, session, rows)
        elif i % 10 == 9:  # a sub-agent's file beside the previous session
            path = sessions[-1].parent / sessions[-1].stem / "subagents" / f"agent-a{i}.jsonl"
            data = claude_rows(rng, sessions[-1].stem, rows, agent=f"a{i}")
        else:
            path = folder / f"-home-dev-project-{i % 20}" / f"{session}.jsonl"
            data = claude_rows(rng, session, rows)
        write(path, data)
        total += len(data)
        if not (tool == "claude-code" and i % 10 == 9):
            sessions.append(path)
    return sessions, total


def timed(repo: ExperienceRepository, tool: Tool, folder: Path) -> tuple[float, int, int]:
    start = time.perf_counter()
    report = asyncio.run(ingest_from(repo, tool, path=folder))
    return time.perf_counter() - start, len(report.files), report.not_read


def bench(tool: Tool, files: int, rows: int, work: Path) -> None:
    folder = work / tool
    sessions, total = generate(tool, folder, files, rows, seed=len(tool))
    init_repository(work / f"repo-{tool}", seed=ROOT / "example_repo")
    repo = ExperienceRepository.open(work / f"repo-{tool}")
    seconds, read, _ = timed(repo, tool, folder)
    print(f"{tool}: {files} files, {total} rows")
    print(f"  first ingest:  {seconds:7.1f} s  {1000 * seconds / total:6.3f} ms/row  "
          f"{1000 * seconds / files:7.1f} ms/file  ({read} files read; bound 2 ms/row)")
    seconds, read, not_read = timed(repo, tool, folder)
    print(f"  unchanged:     {seconds:7.1f} s  {1000 * seconds / files:7.2f} ms/file  "
          f"({read} read, {not_read} not read)")
    rng = random.Random(99)
    grown = sessions[:: 10]
    extra = 0
    for path in grown:
        more = (codex_rows(rng, path.stem, 10)[2:] if tool == "codex"
                else claude_rows(rng, path.stem, 8))
        write(path, more, "a")
        extra += len(more)
    seconds, read, _ = timed(repo, tool, folder)
    print(f"  {len(grown)} grown: {seconds:7.1f} s  {1000 * seconds / extra:6.3f} ms/new row  "
          f"{1000 * seconds / len(grown):7.1f} ms/grown file  ({read} files read)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--tool", choices=["codex", "claude-code", "both"], default="both")
    args = parser.parse_args()
    tools: list[Tool] = ["codex", "claude-code"] if args.tool == "both" else [args.tool]
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as tmp:
        for tool in tools:
            bench(tool, args.files, args.rows, Path(tmp))


if __name__ == "__main__":
    main()
