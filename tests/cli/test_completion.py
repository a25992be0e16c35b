"""Shell completion (click's, through ``_EXPGIT_COMPLETE``) of open proposal and gradient
ids, run as the shell runs it: a separate process with the completion variables set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Driver


def complete(words: str, cwd: Path) -> list[str]:
    """The completions bash would be offered for ``words`` (the last one being typed)."""
    env = {**os.environ, "_EXPGIT_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    proc = subprocess.run([sys.executable, "-m", "expgit"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if line]


@pytest.mark.slow
def test_ids_of_open_items_complete(driver: Driver, tmp_path: Path) -> None:
    g1 = driver.propose("checked-baggage-allowance", None)
    g2 = driver.propose("when-to-transfer-to-human", None)
    pid = driver.merge(g1)
    repo = driver.path
    assert complete("expgit apply ", repo) == [pid]
    assert complete(f"expgit -C {repo} merge ", tmp_path) == sorted([g1, g2])
    assert complete(f"expgit -C {repo} merge {g2[:3]}", tmp_path) == [g2]
    assert complete("expgit review ", repo) == sorted([pid, g1, g2])
    driver.apply(pid)
    assert complete("expgit apply ", repo) == []  # applied: no longer open


@pytest.mark.slow
def test_completion_outside_a_repository_offers_nothing(tmp_path: Path) -> None:
    assert complete("expgit apply ", tmp_path) == []
    assert "init" in complete("expgit in", tmp_path)
