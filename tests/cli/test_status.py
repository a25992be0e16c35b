"""``expgit status``: one screen and ``--json`` on real repositories (a fresh empty one,
one with proposals and gradients, one a trained run measured, a stale lock, a bare one);
it reads only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import agent, cases_file
from conftest import EXAMPLE, Driver, example_flat, git, repo_state
from json_shapes import assert_shape
from scripted_pipeline import BAGGAGE_CASE, PETS_CASE
from test_cli_candidate import steps_with, train

from expgit.init import init_repository
from expgit.store.repository import ExperienceRepository


def status(run_cli: Any, path: Path) -> tuple[dict[str, Any], list[str]]:
    """``status --json`` (checked against the documented shape) and the screen, both exit 0."""
    shown = run_cli("-C", path, "status", "--json")
    assert shown.code == 0, shown.err
    data = json.loads(shown.out)
    assert_shape("status", data)
    screen = run_cli("-C", path, "status")
    assert screen.code == 0, screen.err
    return data, screen.out.splitlines()


def test_a_fresh_empty_repository(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "empty"
    assert run_cli("init", path).code == 0
    before = repo_state(path)
    data, screen = status(run_cli, path)
    main = git(path, "rev-parse", "main").strip()
    assert data["commit"] == main and data["branch"] == "main"
    assert data["last_update"]["commit"] == main and data["last_update"]["kind"] == "init"
    assert (data["proposals"], data["gradients"], data["last_run"]) == ([], [], None)
    assert data["lock"]["lock"] == "free" and data["lock"]["healthy"] is True
    assert data["sessions"] == {"branch": "expgit/sessions", "sessions": 0, "pending": []}
    assert screen[0] == f"main: {main[:12]}"
    assert screen[2:] == ["open proposals: 0", "open gradients in no proposal: 0",
                          "lock: free", "sessions: 0 pending of 0",
                          "last run: none measured a proposal"]
    assert repo_state(path) == before  # read only


def edit(driver: Driver, name: str, line: str) -> str:
    text = example_flat(name)
    return driver.propose(name, f"{text}\n{line}\n", rationale=f"{name}: {line}",
                          confidence=0.7)


def test_proposals_and_the_gradients_no_proposal_holds(run_cli: Any, driver: Driver) -> None:
    held = edit(driver, "refund-method-rules", "Ask how the ticket was paid.")
    pid = driver.merge(held)
    loose = edit(driver, "checked-baggage-allowance", "Check the fare class first.")
    data, screen = status(run_cli, driver.path)
    [proposal] = data["proposals"]
    assert proposal["id"] == pid and proposal["gradients"] == [held]
    assert proposal["effect"] is None  # merged by hand: never measured
    assert [g["id"] for g in data["gradients"]] == [loose]  # the held one is in pid
    assert data["last_run"] is None
    assert f"  {pid}  1 gradient(s), not measured: {proposal['subject']}" in screen
    assert "open gradients in no proposal: 1 (`expgit merge --all` makes one)" in screen
    assert f"  {loose}  update checked-baggage-allowance, confidence 0.70" in screen
    driver.apply(pid)
    data, screen = status(run_cli, driver.path)
    main = driver.rev()
    assert data["proposals"] == [] and data["commit"] == main
    assert data["last_update"] == {
        "commit": main, "kind": "proposal", "subject": proposal["subject"],
        "author": data["last_update"]["author"], "time": data["last_update"]["time"],
        "proposal": pid}
    assert screen[1].startswith(f"  last update: {main[:12]} proposal ")
    assert screen[1].endswith(f": {proposal['subject']}")


@pytest.mark.slow
def test_a_trained_proposal_shows_its_measured_effect_and_is_the_last_run(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    server = serve(steps_with(seeded_repo, agent, [agent] * 6))
    result = train(run_cli, path, tmp_path, server.url, "--eval-cases",
                   cases_file(tmp_path / "e.yaml", BAGGAGE_CASE, PETS_CASE))
    assert result.code == 0, result.err
    report = json.loads((tmp_path / "run.json").read_text())
    [pid] = report["proposals"]
    data, screen = status(run_cli, path)
    [proposal] = data["proposals"]
    effect = {"baseline": "1/2 (50.00%)", "candidate": "2/2 (100.00%)", "delta": 50.0,
              "gate": "not checked", "calls": proposal["effect"]["calls"], "cost": "unknown"}
    assert proposal["id"] == pid and proposal["effect"] == effect
    assert 0 < effect["calls"] <= report["usage"]["total"]["calls"]
    assert data["last_run"] == {"proposal": pid, "state": "open",
                                "time": proposal["time"], "effect": effect}
    assert data["gradients"] == []  # both are in the proposal
    shown = ("baseline 1/2 (50.00%) -> candidate 2/2 (100.00%), delta +50.00pp, "
             "gate not checked")
    assert f"  {pid}  2 gradient(s), {shown}: {proposal['subject']}" in screen
    assert screen[-1].startswith(f"last run: proposal {pid} (open) ")
    assert screen[-1].endswith(f"{shown}; {effect['calls']} LLM calls, cost unknown")
    assert run_cli("-C", path, "reject", pid, "--reason", "not now").code == 0
    data, _ = status(run_cli, path)
    assert data["proposals"] == [] and data["last_run"]["state"] == "rejected"


def dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def test_a_stale_lock_is_diagnosed_as_doctor_does(run_cli: Any, driver: Driver) -> None:
    pid = driver.merge(edit(driver, "refund-method-rules", "Ask how it was paid."))
    git_dir = driver.path / ".git"
    record = {"pid": dead_pid(), "host": socket.gethostname(), "time": time.time(),
              "token": "t", "purpose": f"expgit apply {pid}",
              "pidns": os.readlink("/proc/self/ns/pid"), "ref_locks": [], "updates": []}
    (git_dir / "expgit.lock").write_text(json.dumps(record))
    before = repo_state(driver.path)
    data, screen = status(run_cli, driver.path)
    doctor = run_cli("-C", driver.path, "doctor", "--json")
    assert doctor.code == 3  # doctor: something --fix recovers; status still exits 0
    assert_shape("doctor", json.loads(doctor.out))  # its holder's time: whole seconds
    assert data["lock"] == json.loads(doctor.out)
    assert data["lock"]["lock"] == "stale" and data["lock"]["holder"]["pid"] == record["pid"]
    assert any(line.startswith("lock: stale, left by ") and
               line.endswith("run `expgit doctor --fix`") for line in screen), screen
    assert (git_dir / "expgit.lock").exists() and repo_state(driver.path) == before


def test_a_bare_repository(run_cli: Any, bare_repo: ExperienceRepository,
                           tmp_path: Path) -> None:
    path = tmp_path / "server.git"
    data, screen = status(run_cli, path)
    assert data["commit"] == bare_repo.main_commit() and data["lock"]["healthy"] is True
    assert screen[0] == f"main: {data['commit'][:12]}"


def test_not_a_repository_is_refused(run_cli: Any, tmp_path: Path) -> None:
    shown = run_cli("-C", tmp_path, "status", "--json")
    assert shown.code == 2 and "not a git repository" in shown.err
    assert json.loads(shown.out)["exit_code"] == 2


def test_an_overridden_evidence_template_leaves_what_it_does_not_show_null() -> None:
    from expgit.status import measured_effect

    assert measured_effect("## Summary\n\nno figures here\n") is None
    custom = measured_effect("Why.\n\n## Measured effect\n\nGate: **FAILED** (delta).\n")
    assert custom is not None and custom.model_dump() == {
        "baseline": None, "candidate": None, "delta": None, "gate": "FAILED",
        "calls": None, "cost": None}


def test_init_from_a_seed_and_a_session_pending(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "seeded"
    init_repository(path, seed=EXAMPLE, layout="flat")
    session = tmp_path / "long.jsonl"
    rows = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
            for i in range(4)]
    session.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingested = run_cli("-C", path, "sessions", "ingest", session, "--json")
    assert ingested.code == 0, ingested.err
    data, screen = status(run_cli, path)
    sessions = json.loads(run_cli("-C", path, "sessions", "status", "--json").out)
    assert data["sessions"]["pending"] == [p["session"] for p in sessions["pending"]]
    assert len(data["sessions"]["pending"]) == 1 and data["sessions"]["sessions"] == 1
    assert "sessions: 1 pending of 1 (`expgit sessions run` segments them)" in screen
