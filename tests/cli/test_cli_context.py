"""``expgit context`` and docs/context.md's Python agent that uses the same selection."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository

QUERY = "Can I cancel my basic economy ticket?"


def test_context_prints_markdown_and_reasons(seeded_repo: ExperienceRepository,
                                             run_cli: Any, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    result = run_cli("-C", repo, "context", QUERY, "--top-k", "2")
    assert result.code == 0, result.err
    assert result.out.startswith("# Experiences")
    assert result.out.count("<experience name=") == 2
    assert result.out.index('"cancellation-eligibility-rules"') < result.out.index(
        "</experience>")
    assert "cancellation-eligibility-rules: rank 1 (bm25 score" in result.err
    assert "2 of 7 experiences" in result.err
    everything = run_cli("-C", repo, "context", QUERY, "--at", "main")
    assert everything.out.count("<experience name=") == 7  # a small library fits whole


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--top-k", "-1"], 2, "top_k must be 0 or more"),
    (["--token-budget", "0"], 2, "token budget must be at least 1"),
    (["--at", "no-such-rev"], 5, "unknown revision"),
])
def test_bad_input_is_refused(seeded_repo: ExperienceRepository, run_cli: Any,
                              tmp_path: Path, args: list[str], code: int, message: str
                              ) -> None:
    result = run_cli("-C", tmp_path / "repo", "context", QUERY, *args)
    assert result.code == code and message in result.err
    assert len(result.err.strip().splitlines()) == 1 and result.out == ""


def test_always_on_over_the_budget_is_refused(seeded_repo: ExperienceRepository,
                                              run_cli: Any, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    path = repo / "experiences" / "checked-baggage-allowance.md"
    text = path.read_text().replace("\nsummary:", "\nalways: true\nsummary:", 1)
    new = tmp_path / "new.md"
    new.write_text(text)
    gid = run_cli("-C", repo, "propose", "checked-baggage-allowance", "--content-file",
                  new, "--rationale", "always relevant").out.strip()
    pid = run_cli("-C", repo, "merge", gid).out.strip().split()[0]
    assert run_cli("-C", repo, "apply", pid).code == 0
    shown = run_cli("-C", repo, "context", "refund to a gift card", "--top-k", "0",
                    "--json")
    assert '"reason": "always-on"' in shown.out and '"checked-baggage-allowance"' in shown.out
    refused = run_cli("-C", repo, "context", "x", "--token-budget", "50")
    assert refused.code == 2 and "always-on experiences need about" in refused.err


def test_the_docs_python_agent_runs(seeded_repo: ExperienceRepository, serve: Any,
                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    [code] = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "context.md").read_text(),
                        re.S)
    server = serve([Step("rollout", "No: basic economy cannot be cancelled.")])
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.chdir(tmp_path / "repo")
    exec(compile(code, "docs/context.md", "exec"), {})
    server.chat.assert_done()
    [(_, messages, _)] = server.chat.calls
    assert '<experience name="cancellation-eligibility-rules">' in messages[0]["content"]
    assert messages[0]["content"].count("<experience name=") == 3
    out = capsys.readouterr().out
    assert "basic economy cannot be cancelled" in out
    assert "('cancellation-eligibility-rules', 'rank 1 (bm25 score" in out
