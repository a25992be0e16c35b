"""``expgit eval --compare A B --gate --comment FILE``, the pull request gate's command
(examples/ci/expgit-ci.sh runs it; tests/test_ci_examples.py runs the whole job): its bad
inputs, refused before any model call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cli_support import cases_file
from scripted_pipeline import PETS_CASE

from expgit.store.repository import ExperienceRepository


def test_gate_and_comment_need_compare(run_cli: Any, serve: Any,
                                       seeded_repo: ExperienceRepository,
                                       tmp_path: Path) -> None:
    path = tmp_path / "repo"
    server = serve([])
    cases = cases_file(tmp_path / "c.yaml", PETS_CASE)
    llm = ("--llm", "openai", "--base-url", server.url)
    for flag, flags in (("--gate", ["--gate"]),
                        ("--comment", ["--comment", str(tmp_path / "gate.md")]),
                        ("--gate", ["--at", "main", "--gate"])):
        result = run_cli("-C", path, "eval", "--cases", cases, *flags, *llm)
        assert result.code == 2, result.err
        assert result.err == (f"expgit: error: {flag} needs --compare A B "
                              "(B is measured against A)\n")
    unknown = run_cli("-C", path, "eval", "--cases", cases, "--compare", "main", "nope",
                      "--gate", "--comment", tmp_path / "gate.md", *llm)
    assert unknown.code == 5 and "unknown revision 'nope'" in unknown.err
    assert server.requests == 0 and not (tmp_path / "gate.md").exists()
