"""Shared fixtures: real git repositories in temp dirs, the real CLI in-process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from expgit.cli import main as cli_main
from expgit.init import init_repository
from expgit.repository import ExperienceRepository

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "example_repo"
DEMO = EXAMPLE / "demo"


@pytest.fixture(autouse=True)
def git_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[None]:
    """A clean, deterministic git identity and no user/global config."""
    home = tmp_path_factory.mktemp("home")
    for key in list(os.environ):
        if key.startswith("GIT_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test Author")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "author@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "committer@example.com")
    yield


def git(cwd: Path, *args: str, input: str | None = None) -> str:
    """Run git in ``cwd``; fail the test with git's message if it fails."""
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          input=input)
    assert proc.returncode == 0, f"git {' '.join(args)} failed: {proc.stderr}"
    return proc.stdout


def fsck(path: Path) -> None:
    proc = subprocess.run(["git", "fsck", "--strict", "--no-progress"], cwd=path,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "error" not in proc.stderr.lower(), proc.stderr


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Run the real CLI in-process: ``run_cli("-C", dir, "list", "--json")``."""

    def run(*args: str | Path) -> CliResult:
        capsys.readouterr()
        code = cli_main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def run_expgit(*args: str | Path, cwd: Path | None = None,
               input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run expgit as a separate process (``python -m expgit``)."""
    return subprocess.run([sys.executable, "-m", "expgit", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, input=input)


@pytest.fixture
def seeded_repo(tmp_path: Path) -> ExperienceRepository:
    """A non-bare repository initialised from example_repo/ (hooks installed)."""
    init_repository(tmp_path / "repo", seed=EXAMPLE)
    return ExperienceRepository.open(tmp_path / "repo")


@pytest.fixture
def bare_repo(tmp_path: Path) -> ExperienceRepository:
    """A bare repository initialised from example_repo/ (server hooks installed)."""
    init_repository(tmp_path / "server.git", bare=True, seed=EXAMPLE)
    return ExperienceRepository.open(tmp_path / "server.git")


def edited(name: str, extra: str, repo: ExperienceRepository) -> str:
    """The current text of experience ``name`` on main with ``extra`` appended."""
    entry = repo.snapshot().get(name)
    assert entry is not None
    return entry.text + extra
