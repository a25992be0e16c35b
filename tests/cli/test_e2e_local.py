"""End to end with the embedded local model: ``expgit train --mode propose`` on a
repository made from example_repo creates trajectories, gradients and a proposal, or,
when the model wrote only junk, nothing but the counts and an exit 7 naming
``degenerate``; ``main`` stays where it was. Mechanics are asserted, not lesson quality.
Runs wherever ``llama-cpp-python`` is installed (CI installs the ``local`` extra)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLE, fsck, git, run_expgit

from expgit.errors import EXIT_RUN_ERRORS
from expgit.init import init_repository
from expgit.llm.local import find_gguf
from expgit.llm.provenance import hash_file

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="the local extra (llama-cpp-python) is not installed"),
    pytest.mark.slow("minutes"),  # the embedded model, on CPU
]


def test_train_propose_with_the_local_model(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    init_repository(repo, seed=EXAMPLE, layout="flat")
    main_before = git(repo, "rev-parse", "main").strip()
    raw = yaml.safe_load((EXAMPLE / "cases" / "train.yaml").read_text())
    cases = raw["cases"] if isinstance(raw, dict) else raw
    one_case = tmp_path / "cases.yaml"
    one_case.write_text(yaml.safe_dump([cases[0]], sort_keys=False))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    proc = run_expgit("-C", repo, "train", "--cases", one_case, "--mode", "propose",
                      "--llm", "local", "--report", tmp_path / "report.json",
                      "--pr-body", tmp_path / "pr.md")

    assert "[train_epoch] epoch=0 cases=1 " in proc.stdout, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["main_before"] == report["main_after"] == main_before
    assert git(repo, "rev-parse", "main").strip() == main_before
    proposals = git(repo, "for-each-ref", "--format=%(refname)",
                    "refs/heads/expgit/proposals/").split()
    # the models named (issue 25): the embedded one, by its file's hash
    sha = hash_file(find_gguf())
    assert report["provenance"]["endpoint"] == "embedded"
    assert report["provenance"]["model_sha256"] == sha
    if proc.returncode == EXIT_RUN_ERRORS and not proposals:
        # a 135M model's edits are often junk: the degeneracy guard keeps them out of git,
        # counts them and names the cause (issue 24)
        assert "degenerate reply" in proc.stderr, proc.stderr
        assert report["redactions"].get("degenerate", 0) >= 1
        assert report["failures"] and all(f["cause"].startswith("degenerate reply")
                                          for f in report["failures"]), report["failures"]
        assert git(repo, "for-each-ref", "refs/heads/expgit/gradients/") == ""  # no junk
    else:
        assert proc.returncode == 0, proc.stderr
        trajectories = [name for name in git(repo, "ls-tree", "-r", "--name-only",
                                             "expgit/trajectories").split()
                        if name.endswith(".md")]  # each with its .transcript.json beside it
        assert len(trajectories) == 1 and trajectories[0].startswith("trajectories/")
        assert len(proposals) == 1, proc.stdout + proc.stderr
        cited = git(repo, "log", "-1", "--format=%(trailers:key=Expgit-Gradient,valueonly)",
                    proposals[0]).split()
        gradients = git(repo, "for-each-ref", "--format=%(objectname)",
                        "refs/heads/expgit/gradients/").split()
        assert cited and set(cited) <= set(gradients)
        for commit in [proposals[0], *cited]:
            assert git(repo, "log", "-1",
                       "--format=%(trailers:key=Expgit-Model-Sha256,valueonly)",
                       commit).strip() == sha
        assert (tmp_path / "pr.md").read_text().strip()
    # the cost table: the rollout, then the calls made on it (a junk analysis is the last)
    assert "rollout" in proc.stdout and ("analyze" in proc.stdout or "reflect" in proc.stdout)
    fsck(repo)
