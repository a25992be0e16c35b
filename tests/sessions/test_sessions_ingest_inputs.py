"""``sessions ingest`` on hostile inputs, through the CLI: a line of JSON nested beyond
any real record, named pipes, and a SIGTERM in the middle of an ingest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import fsck, git

from expgit.store.repository import ExperienceRepository

HELLO = [{"role": "user", "content": "Can I bring my cat in the cabin?"},
         {"role": "assistant", "content": "Yes, in a carrier under the seat."}]


def test_a_deeply_nested_line_is_counted_invalid(run_cli: Any, seeded_repo: ExperienceRepository,
                                                 tmp_path: Path) -> None:
    session = tmp_path / "deep.jsonl"
    session.write_text(json.dumps(HELLO[0]) + "\n" + "[" * 100_000 + "\n"
                       + '{"a": ' * 500 + "1" + "}" * 500 + "\n"  # valid, yet no record
                       + json.dumps(HELLO[1]) + "\n")
    out = run_cli("-C", tmp_path / "repo", "sessions", "ingest", session, "--agent", "bot",
                  "--json")
    assert out.code == 0, out.err
    data = json.loads(out.out)
    assert data["files"][0]["invalid_lines"] == [2, 3] and data["invalid_lines"] == 2
    assert data["files"][0]["messages"] == 2
    assert "2 invalid line(s) skipped: 2, 3" in out.err
    fsck(tmp_path / "repo")


def expgit_process(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The CLI as its own process, waited for generously: a regression that blocks (on a
    named pipe) fails the test instead of hanging it."""
    return subprocess.run([sys.executable, "-m", "expgit", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def sessions_tip(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(objectname)", "refs/heads/expgit/sessions")


@pytest.mark.slow
def test_a_named_pipe_named_or_found_is_skipped_unread(seeded_repo: ExperienceRepository,
                                                       tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    folder = tmp_path / "claude" / "project"
    folder.mkdir(parents=True)
    pipe = folder / "pipe.jsonl"
    os.mkfifo(pipe)  # no writer: opening it to read would wait for ever
    good = folder / "good.jsonl"
    good.write_text("".join(json.dumps(row) + "\n" for row in HELLO))
    named = expgit_process("-C", repo, "sessions", "ingest", pipe, good, "--agent", "bot",
                           "--json")
    assert named.returncode == 0, named.stderr
    files = {f["file"]: f for f in json.loads(named.stdout)["files"]}
    assert files[str(pipe)]["outcome"] == "not_regular"
    assert files[str(pipe)]["status"] == "skipped"
    assert files[str(good)]["outcome"] == "new" and files[str(good)]["messages"] == 2
    assert f"{pipe}: a named pipe, not a regular file: skipped, not read" in named.stderr
    found = expgit_process("-C", repo, "sessions", "ingest", "--from", "claude-code",
                           "--path", tmp_path / "claude", "--json")
    assert found.returncode == 0, found.stderr
    assert [(f["file"], f["outcome"]) for f in json.loads(found.stdout)["files"]] == [
        (str(pipe), "not_regular")]
    alone = expgit_process("-C", repo, "sessions", "ingest", pipe)  # only the pipe
    assert alone.returncode == 0 and "a named pipe" in alone.stderr, alone.stderr
    fsck(repo)


@pytest.mark.slow
def test_sigterm_ends_an_ingest_with_143_and_nothing_half_written(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    """SIGTERM once the ingest has read its large input (/proc/PID/io: what importing
    its code reads, plus the file), while it parses and redacts: exit 143 with a
    message, no commit, no lock left."""
    if not Path("/proc/self/io").exists():
        pytest.skip("needs /proc/PID/io (Linux)")
    repo = tmp_path / "repo"
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps(row) + "\n" for row in HELLO))
    imports = subprocess.run(  # what the ingest reads before its input: its code
        [sys.executable, "-c", "import expgit.cli, expgit.cli.sessions, "
         "expgit.sessions.ingest.command\nprint(open('/proc/self/io').read())"],
        capture_output=True, text=True, timeout=120, check=True)
    assert expgit_process("-C", repo, "sessions", "ingest", small).returncode == 0
    before = sessions_tip(repo)
    big = tmp_path / "big.jsonl"  # seconds of parsing and redacting after it is read
    with big.open("w") as out:
        for i in range(60_000):
            out.write(json.dumps({"role": ("user", "assistant")[i % 2],
                                  "content": f"message {i}: how many bags for a gold "
                                             f"member on flight {i}?"}) + "\n")
    read_at_least = _rchar(imports.stdout) + big.stat().st_size
    proc = subprocess.Popen([sys.executable, "-m", "expgit", "-C", str(repo), "sessions",
                             "ingest", str(big), "--agent", "bot"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and _bytes_read(proc.pid) < read_at_least:
            assert time.monotonic() < deadline, "the ingest never read its input"
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM (exit 143)" in err and "Traceback" not in err
    assert sessions_tip(repo) == before  # the one commit of the ingest was not made
    assert not list((repo / ".git").glob("**/*.lock"))
    fsck(repo)


def _rchar(io: str) -> int:
    return next((int(line.split()[1]) for line in io.splitlines()
                 if line.startswith("rchar:")), 0)


def _bytes_read(pid: int) -> int:
    """What process ``pid`` has read so far (Linux: /proc/PID/io), 0 if unknown."""
    try:
        return _rchar(Path(f"/proc/{pid}/io").read_text())
    except OSError:
        return 0
