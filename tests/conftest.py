"""Shared fixtures: real git repositories in temp dirs, the real CLI in-process.

Also the two rules of the parallel run (``pytest -n auto``, docs/development.md): the
tests marked ``slow`` run first (``slow("minutes")`` before the others), and xdist hands
each worker one test at a time, so the longest tests start at once on different workers
and the short ones fill in around them (greedy longest-first), instead of one worker
getting a chunk of them in a row.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from expgit.cli import main as cli_main
from expgit.git.repo import GitRepo
from expgit.init import init_repository
from expgit.store.format.experience import in_layout, parse_experience
from expgit.store.repository import ExperienceRepository

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "example_repo"
DEMO = EXAMPLE / "demo"


def pytest_configure(config: pytest.Config) -> None:
    # xdist's load scheduler sends consecutive chunks of the collection to each worker;
    # one at a time (with its look-ahead of 2) is the greedy schedule the order below
    # wants. An explicit --maxschedchunk wins; without xdist the option is absent.
    if getattr(config.option, "maxschedchunk", False) is None:
        config.option.maxschedchunk = 1


def start_order(item: pytest.Item) -> int:
    """0 for ``@pytest.mark.slow("minutes")`` (a test of a minute or more), 1 for the
    other ``slow`` tests, 2 for the rest."""
    slow = item.get_closest_marker("slow")
    return 2 if slow is None else 0 if slow.args == ("minutes",) else 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first, each group in its own order (a stable sort)."""
    items.sort(key=start_order)


@pytest.fixture(autouse=True)
def git_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[None]:
    """A clean, deterministic git identity and no user/global config."""
    home = tmp_path_factory.mktemp("home")
    for key in list(os.environ):
        if key.startswith("GIT_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    # caches (the GGUF hashes of expgit.llm.provenance) go under this test's HOME, never
    # into a folder that parallel workers share
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test Author")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "author@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "committer@example.com")
    # Hooks run `python -m expgit.hooks.run` inside the test repositories.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
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


class RunCli(Protocol):
    """The ``run_cli`` fixture's type."""

    def __call__(self, *args: str | Path) -> CliResult: ...


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> RunCli:
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
    init_repository(tmp_path / "repo", seed=EXAMPLE, layout="flat")
    return ExperienceRepository.open(tmp_path / "repo")


@pytest.fixture
def bare_repo(tmp_path: Path) -> ExperienceRepository:
    """A bare repository initialised from example_repo/ (server hooks installed)."""
    init_repository(tmp_path / "server.git", bare=True, seed=EXAMPLE, layout="flat")
    return ExperienceRepository.open(tmp_path / "server.git")


def as_flat(path: Path) -> str:
    """The SKILL.md at ``path`` as a flat ``<name>.md`` (init's conversion)."""
    return in_layout(parse_experience(path.read_text(), str(path)), False, str(path)).render()


def example_flat(name: str) -> str:
    """Example experience ``name`` as a repository seeded from example_repo/ with
    ``layout="flat"`` holds it: its SKILL.md converted by init (``<name>.md``)."""
    return as_flat(EXAMPLE / "skills" / name / "SKILL.md")


def demo_flat(name: str) -> str:
    """The demo's "after" version of experience ``name`` (example_repo/demo/), flat."""
    return as_flat(DEMO / name / "SKILL.md")


def edited(name: str, extra: str, repo: ExperienceRepository) -> str:
    """The current text of experience ``name`` on main with ``extra`` appended."""
    entry = repo.snapshot().get(name)
    assert entry is not None
    return entry.text + extra


# --------------------------------------------------------------------------- helpers
# Added for the workflow and bad-input tests: a small driver of the real CLI against one
# repository, and a fingerprint of everything a failed command must leave unchanged.


def repo_state(path: Path) -> tuple[str, str]:
    """Every ref with its target, and the object counts: equal before/after = no write."""
    return git(path, "for-each-ref"), git(path, "count-objects", "-v")


@dataclass
class Driver:
    """The CLI as a user drives it against one repository (``-C path``)."""

    run_cli: RunCli
    path: Path
    scratch: Path

    def __call__(self, *args: str | Path) -> CliResult:
        return self.run_cli("-C", self.path, *args)

    def ok(self, *args: str | Path) -> CliResult:
        result = self(*args)
        assert result.code == 0, f"expgit {' '.join(map(str, args))}: {result.err}"
        return result

    def fails(self, code: int, *args: str | Path) -> CliResult:
        result = self(*args)
        assert result.code == code, (
            f"expgit {' '.join(map(str, args))}: exit {result.code}, want {code}: "
            f"{result.out}{result.err}")
        return result

    def git(self, *args: str) -> str:
        return git(self.path, *args)

    def rev(self, rev: str = "main") -> str:
        return self.git("rev-parse", "--verify", rev).strip()

    def text(self, name: str, rev: str = "main") -> str:
        return self.git("show", f"{rev}:experiences/{name}.md")

    def file(self, text: str | bytes, label: str = "content") -> Path:
        """Write ``text`` to a fresh file outside the repository; return its path."""
        self.scratch.mkdir(parents=True, exist_ok=True)
        path = self.scratch / f"{label}-{len(list(self.scratch.iterdir()))}.md"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        return path

    def propose(self, name: str, content: str | None = None, *, rationale: str = "it helps",
                evidence: tuple[str, ...] = (), confidence: float | None = None) -> str:
        args: list[str | Path] = ["propose", name, "--rationale", rationale]
        args += ["--delete"] if content is None else ["--content-file", self.file(content)]
        for item in evidence:
            args += ["--evidence", item]
        if confidence is not None:
            args += ["--confidence", str(confidence)]
        gid = self.ok(*args).out.strip()
        fsck(self.path)
        return gid

    def merge(self, *ids: str) -> str:
        pid = self.ok("merge", *(ids or ("--all",))).out.strip()
        fsck(self.path)
        return pid

    def apply(self, pid: str) -> CliResult:
        result = self.ok("apply", pid)
        fsck(self.path)
        return result

    def state(self) -> tuple[str, str]:
        return repo_state(self.path)


@pytest.fixture
def driver(run_cli, seeded_repo: ExperienceRepository, tmp_path: Path  # type: ignore[no-untyped-def]
           ) -> Driver:
    """The CLI driving the seeded (non-bare) repository at ``tmp_path / "repo"``."""
    return Driver(run_cli, tmp_path / "repo", tmp_path / "scratch")


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start local OpenAI-compatible servers answering from strict scripts:
    ``serve([Step(...), ...]) -> ScriptServer`` (its ``url``, ``chat``, ``unexpected``);
    all are stopped after the test."""
    from script_server import ScriptServer

    from expgit.llm.scripted import ScriptedChatModel

    servers: list[ScriptServer] = []

    def start(steps: list[Any]) -> ScriptServer:
        servers.append(ScriptServer(ScriptedChatModel(steps)))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def commits(repo: GitRepo, count: int) -> list[str]:
    """``count`` commits in a row (each the parent of the next) of one small tree."""
    tree = repo.edit_tree(None, {"f": repo.write_blob(b"f\n")})
    made: list[str] = []
    for i in range(count):
        made.append(repo.write_commit(tree, made[-1:], f"c{i}\n"))
    return made


# ------------------------------------------------------------- several machines
# Added for the shared-remote tests: one bare server that logs every ref update, its
# clones, and the check that no update of the server was ever forced.


def shared_server(tmp_path: Path, clones: int) -> tuple[Path, list[Path]]:
    """A bare repository seeded from example_repo/ (server hooks installed) that logs
    every ref update (``core.logAllRefUpdates=always``), and ``clones`` clones of it."""
    server = tmp_path / "server.git"
    init_repository(server, bare=True, seed=EXAMPLE, layout="flat")
    git(server, "config", "core.logAllRefUpdates", "always")
    paths = [tmp_path / f"clone{i}" for i in range(1, clones + 1)]
    for path in paths:
        git(tmp_path, "clone", "-q", str(server), str(path))
    return server, paths


def ref_updates(server: Path) -> list[tuple[str, str, str]]:
    """``(ref, old, new)`` of every update the server's reflogs hold."""
    found = []
    for log in (server / "logs").rglob("*"):
        if log.is_file():
            ref = log.relative_to(server / "logs").as_posix()
            for line in log.read_text().splitlines():
                old, new = line.split()[:2]
                found.append((ref, old, new))
    return found


def assert_only_fast_forwards(server: Path) -> int:
    """Every logged update of every ref of ``server`` created it or fast-forwarded it
    (no push was forced, no ref deleted); the number of updates."""
    updates = ref_updates(server)
    zero = "0" * 40
    for ref, old, new in updates:
        assert new != zero, f"{ref} was deleted"
        if old != zero:
            proc = subprocess.run(["git", "merge-base", "--is-ancestor", old, new],
                                  cwd=server, capture_output=True)
            assert proc.returncode == 0, f"{ref}: {old[:12]} -> {new[:12]} was forced"
    return len(updates)
