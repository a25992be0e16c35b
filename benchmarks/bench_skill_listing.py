"""Listing mode against retrieval mode: the rollout prompt tokens it adds on the example
cases, and the size of the example skills' listing (run by hand; asserts nothing).

    python benchmarks/bench_skill_listing.py

1. The example experiences (``example_repo/``) as a skills-layout repository in a temp
   folder (each flat ``<name>.md`` written as ``skills/<name>/SKILL.md``; a repository
   already in the skills layout is taken as it is).
2. The tool-calling cases of ``example_repo/cases/airline_eval.yaml`` run by the real
   executor of :mod:`expgit.runs.wiring` with a scripted model, once with ``[agent]
   skills = "retrieval"`` and once with ``"listing"``. The scripted agent of listing
   mode loads one skill per conversation with the ``Skill`` tool (the listed skill whose
   name shares most words with the user's message), as a real agent that uses a skill
   would, then answers; in retrieval mode it answers at once. The scripted user says
   one message, then stops. Each rollout call's prompt is counted with expgit's own
   estimate (:func:`expgit.store.format.experience.estimate_tokens`, about four UTF-8 bytes a
   token) over its messages and its tool schemas.
3. The listing of the example skills: its characters and estimated tokens, against
   Claude Code's and Codex's budgets (what ``expgit validate`` prints).

Figures of the last run (2026-12-03, example_repo at 81e7b2f, 20 cases): see the
"Performance" section of docs/skill-listing.md.
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from expgit.init import init_repository
from expgit.llm.port import ToolCall, ToolMessages, ToolTurn, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.retrieval.skill_listing import budget_checks, build_listing
from expgit.store.format.experience import estimate_tokens, parse_experience
from expgit.store.repository import ExperienceRepository
from expgit.train.cases import load_cases
from expgit.train.context import ExecutionContext

EXAMPLE = Path(__file__).resolve().parents[1] / "example_repo"
CASES = EXAMPLE / "cases" / "airline_eval.yaml"
SKILL_NAME = re.compile(r"<name>\n([^<\n]+)\n</name>")
WORD = re.compile(r"[a-z]+")


def skills_seed(folder: Path) -> Path:
    """A seed folder of the example skills in the skills layout."""
    toml = (EXAMPLE / "expgit.toml").read_text()
    if 'layout = "skills"' in toml:
        return EXAMPLE
    (folder / "skills").mkdir(parents=True)
    for path in sorted((EXAMPLE / "experiences").glob("*.md")):
        exp = parse_experience(path.read_text(), path.name)
        skill = exp.model_copy(update={"raw_front_matter": None, "spec_fields": {}})
        (folder / "skills" / exp.name).mkdir()
        (folder / "skills" / exp.name / "SKILL.md").write_text(skill.render())
    (folder / "expgit.toml").write_text('experiences_root = "skills"\nlayout = "skills"\n'
                                        "token_budget = 800\n")
    return folder


def with_agent_skills(repo: Path, mode: str) -> None:
    """Commit ``[agent] skills = MODE`` to main's expgit.toml (plumbing: no checkout)."""
    import subprocess

    def git(*args: str, data: str | None = None) -> str:
        return subprocess.run(["git", *args], cwd=repo, input=data, capture_output=True,
                              text=True, check=True).stdout.strip()
    toml = git("show", "main:expgit.toml").split("\n[agent]\n")[0]
    toml += f'\n[agent]\nskills = "{mode}"\n'
    blob = git("hash-object", "-w", "--stdin", data=toml)
    tree = git("ls-tree", "main")
    lines = [line for line in tree.splitlines() if not line.endswith("\texpgit.toml")]
    new_tree = git("mktree", data="\n".join([*lines, f"100644 blob {blob}\texpgit.toml"])
                   + "\n")
    commit = git("commit-tree", new_tree, "-p", "main", "-m", f"agent skills = {mode}")
    git("update-ref", "refs/heads/main", commit)


def agent(listing: bool):  # type: ignore[no-untyped-def]
    def reply(messages: ToolMessages) -> ToolTurn:
        loaded = any(m["role"] == "tool" for m in messages)
        if messages[-1]["role"] != "user" or not listing or loaded:
            return ToolTurn(text="Done.")
        said = set(WORD.findall(str(messages[-1]["content"]).lower()))
        names = SKILL_NAME.findall(str(messages[0]["content"]))
        best = max(names, key=lambda n: len(said & set(n.split("-"))), default=None)
        if best is None:
            return ToolTurn(text="Done.")
        return ToolTurn(text="", tool_calls=[ToolCall(id="s1", name="Skill",
                                             arguments=json.dumps({"skill": best}))])
    return reply


def prompt_tokens(call: tuple[str, Any, dict[str, Any] | None]) -> int:
    _, messages, extra = call
    text = "\n".join(str(m.get("content") or "") for m in messages)
    return estimate_tokens(text) + estimate_tokens(json.dumps((extra or {}).get("tools")))


async def run_mode(repo_path: Path, mode: str) -> tuple[list[int], list[int]]:
    """(first-turn prompt tokens, all rollout prompt tokens) per case."""
    from expgit.runs.wiring import rollout_executor

    with_agent_skills(repo_path, mode)
    repo = ExperienceRepository.open(repo_path)
    cases = load_cases(CASES)
    steps = [Step("rollout", agent(mode == "listing")) for _ in range(len(cases) * 4)]
    steps += [Step("user", "I need help with my checked baggage on my reservation.")
              if i % 2 == 0 else Step("user", "###STOP###") for i in range(len(cases) * 4)]
    chat = ScriptedChatModel(steps)

    class Runtime:  # the LLMHandles the wiring reads (expgit.runs.wiring)
        structured = StructuredLLM(chat, UsageMeter())
        embeddings = None
        description = "scripted"
        is_local = False
        prompt_tokens = None

    executor = rollout_executor(repo, Runtime(), concurrency=1)  # calls in case order
    snapshot = repo.snapshot(repo.main_commit())
    rollouts = await executor.execute(cases, snapshot, ExecutionContext(snapshot.id))
    errors = [r.error for r in rollouts if r.error]
    assert not errors, errors[:2]
    first: list[int] = []
    total: list[int] = []
    calls = [c for c in chat.calls if c[0] == "rollout"]
    # calls are grouped by conversation: a new one starts with [system, user]
    for call in calls:
        tokens = prompt_tokens(call)
        if len(call[1]) == 2:
            first.append(tokens)
            total.append(tokens)
        else:
            total[-1] += tokens
    return first, total


def mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        init_repository(root / "repo", seed=skills_seed(root / "seed"))
        results = {mode: asyncio.run(run_mode(root / "repo", mode))
                   for mode in ("retrieval", "listing")}
        repo = ExperienceRepository.open(root / "repo")
        snapshot = repo.snapshot(repo.main_commit())
        agent_settings = repo.settings.agent
        listing = build_listing(snapshot, budget_tokens=agent_settings.listing_budget_tokens,
                                description_chars=agent_settings.listing_description_chars)
        checks = budget_checks(snapshot, agent_settings.context_window_tokens)
    (r_first, r_total), (l_first, l_total) = results["retrieval"], results["listing"]
    print(f"cases: {len(r_first)} ({CASES.relative_to(EXAMPLE.parent)})")
    print(f"first-turn prompt tokens per case: retrieval {mean(r_first):.0f}, listing "
          f"{mean(l_first):.0f}, extra {mean(l_first) - mean(r_first):+.0f}")
    print(f"rollout prompt tokens per case (every call, one skill loaded in listing mode): "
          f"retrieval {mean(r_total):.0f}, listing {mean(l_total):.0f}, extra "
          f"{mean(l_total) - mean(r_total):+.0f}")
    print(f"listing of the example skills: {len(listing.listed)} listed, "
          f"{len(listing.always)} always-on, {len(listing.text)} characters, "
          f"~{listing.tokens} tokens (budget {listing.budget_tokens})")
    for check in checks:
        print(f"  {check.agent}: {check.chars} characters, ~{check.tokens} tokens; limit "
              f"{check.limit_tokens} tokens"
              + (f" or {check.limit_chars} characters" if check.limit_chars else "")
              + f": {'over' if check.over else 'fits'}")


if __name__ == "__main__":
    main()
