"""A command imports only what it uses: the everyday commands and the hooks load none of
the HTTP, LLM-client or numeric stacks.

Each command runs as a real process. A ``sitecustomize`` module on ``PYTHONPATH``
records, when the process exits, every top-level package in its ``sys.modules``; that
covers the git hooks too, which git starts itself. Timings are the benchmark's job
(``benchmarks/bench_startup.py``), not this test's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLE, ROOT, git

from expgit.init import init_repository

HEAVY = frozenset({"fastapi", "starlette", "uvicorn", "openai", "httpx", "llama_cpp",
                   "numpy", "rich"})  # rich: the live progress of train and eval
SITECUSTOMIZE = """\
import atexit, json, os, sys

def _record():
    with open(os.path.join(os.environ["EXPGIT_TEST_MODULES"], f"{os.getpid()}.json"),
              "w", encoding="utf-8") as out:
        json.dump(sorted({m.partition(".")[0] for m in sys.modules}), out)

atexit.register(_record)
"""


class Probe:
    """Runs commands with the recorder installed; answers what each process loaded."""

    def __init__(self, base: Path) -> None:
        self.records = base / "records"
        self.records.mkdir(parents=True)
        (base / "site").mkdir()
        (base / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        self.env = {**os.environ, "EXPGIT_TEST_MODULES": str(self.records),
                    "PYTHONPATH": os.pathsep.join([str(base / "site"), str(ROOT)])}

    def loaded(self, *argv: str | Path, cwd: Path, input: str | None = None,
               ok: bool = True) -> tuple[set[str], subprocess.CompletedProcess[str]]:
        for old in self.records.iterdir():
            old.unlink()
        proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=self.env, input=input,
                              capture_output=True, text=True, timeout=120)
        assert (proc.returncode == 0) == ok, f"{argv}: {proc.stdout}{proc.stderr}"
        records = list(self.records.iterdir())
        assert records, f"{argv} started no python process"
        modules: set[str] = set()
        for record in records:
            modules |= set(json.loads(record.read_text(encoding="utf-8")))
        return modules, proc

    def expgit(self, *args: str | Path, cwd: Path) -> tuple[set[str], str]:
        modules, proc = self.loaded(sys.executable, "-m", "expgit", *args, cwd=cwd)
        assert "expgit" in modules
        return modules, proc.stdout


@pytest.fixture
def probe(tmp_path: Path) -> Probe:
    return Probe(tmp_path / "probe")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    init_repository(path, seed=EXAMPLE, layout="flat")
    return path


@pytest.mark.slow
def test_the_probe_sees_a_heavy_import(probe: Probe, tmp_path: Path) -> None:
    """The check below can fail: the training service's help loads FastAPI."""
    modules, _ = probe.expgit("serve", "--help", cwd=tmp_path)
    assert {"fastapi", "uvicorn"} <= modules


@pytest.mark.slow
def test_everyday_commands_load_no_heavy_stack(probe: Probe, repo: Path) -> None:
    name = "checked-baggage-allowance"
    new = repo / ".." / "new.md"
    new.write_text((repo / "experiences" / f"{name}.md").read_text() + "\nOne more line.\n")
    loaded: dict[str, set[str]] = {}

    def run(label: str, *args: str | Path) -> str:
        modules, out = probe.expgit("-C", repo, *args, cwd=repo.parent)
        loaded[label] = modules & HEAVY
        return out

    run("--version", "--version")
    run("--help", "--help")
    run("list", "list", "--json")
    run("show", "show", name)
    run("validate", "validate")
    gradient = json.loads(run("propose", "propose", name, "--content-file", new,
                              "--rationale", "a test edit", "--json"))["id"]
    run("gradients", "gradients", "--json")
    proposal = json.loads(run("merge", "merge", gradient, "--json"))["id"]
    run("proposals", "proposals", "--json")
    run("review", "review", proposal)
    run("apply", "apply", proposal)
    run("log", "log")
    run("revert", "revert", "main")
    run("status", "status")
    run("sessions ingest", "sessions", "ingest", EXAMPLE / "sessions" / "pet-question.jsonl",
        "--agent", "bot")
    run("sessions status", "sessions", "status", "--json")
    assert loaded == {label: set() for label in loaded}
    assert len(loaded) == 16


def test_the_hooks_load_no_heavy_stack(probe: Probe, repo: Path) -> None:
    experience = repo / "experiences" / "a-new-rule.md"
    experience.write_text("---\nname: a-new-rule\nsummary: a test\n---\nDo it.\n")
    git(repo, "add", "-A")
    modules, _ = probe.loaded("git", "commit", "-q", "-m", "a rule", cwd=repo)
    assert "expgit" in modules  # the pre-commit hook ran python
    assert modules & HEAVY == set()
