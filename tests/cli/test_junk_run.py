"""A model that only returns junk (issue 24, bad input): ``expgit train`` leaves no
gradient, no proposal, no stored trajectory and no commit, exits 7, and says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli_support import agent, cases_file
from conftest import Driver, repo_state
from scripted_pipeline import BAGGAGE_CASE, PETS_CASE

from expgit.errors import EXIT_RUN_ERRORS
from expgit.llm.scripted import Step

JUNK = json.dumps({
    "title": "Mia Li, Mia Li, Mia Li, Mia Li", "outcome": "failure",
    "summary": "1.2.3.5.0", "key_steps": ["3.10"], "mistakes": [], "lessons": ["24[ ]"],
    "retrieval_anchor": "## Transcript",
    "edits": [{"name": "pets-in-cabin", "action": "create", "rationale": "1.2.3.5.0",
               "summary": "The agent told the user that …", "tags": [],
               "body": "# <Title>\n\nWhen: <situation>\n\nProcedure:\n\nPitfalls:\n",
               "confidence": 7}]})


def test_a_model_that_only_returns_junk_leaves_nothing_and_exits_7(
        driver: Driver, serve: Any, tmp_path: Path) -> None:
    server = serve([Step("rollout", agent), Step("rollout", agent),
                    Step("reflect", JUNK), Step("reflect", JUNK)])
    before = repo_state(driver.path)
    result = driver("train", "--cases", cases_file(tmp_path / "t.yaml", BAGGAGE_CASE,
                                                   PETS_CASE),
                    "--llm", "openai", "--base-url", server.url, "--report",
                    tmp_path / "run.json")
    server.chat.assert_done()  # no merge: there was nothing to merge
    assert result.code == EXIT_RUN_ERRORS, result.out + result.err
    assert repo_state(driver.path) == before  # no trajectory, gradient, proposal, commit
    assert "2 reflect calls: degenerate reply" in result.out
    assert "the run finished with errors: 2 reflect calls: degenerate reply" in result.err
    assert "proposal: none" in result.out
    report = json.loads((tmp_path / "run.json").read_text())
    [failure] = report["failures"]
    assert failure["stage"] == "reflect" and failure["count"] == 2
    assert failure["cause"].startswith("degenerate reply")
    assert report["redactions"]["degenerate"] == 2 + 2 * 2  # analyses, their junk lines
    assert report["proposals"] == []
    [phase] = report["phases"]
    assert phase["gradients"] == 0
    assert any("trajectory not stored: degenerate: the title: it loops" in r
               for r in phase["rejected_edits"])
