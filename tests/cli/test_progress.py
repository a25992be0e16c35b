"""A run's progress on stderr, as a real process: plain lines each printed once when
not a terminal (stdout and stderr joined, as ``2>&1`` does), one live line per phase on
a terminal (a pty) drawn by rich; NO_COLOR honoured; ``--json`` stdout stays one JSON
object. (That the everyday commands never load rich is tests/cli/test_startup.py's.)"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path
from typing import Any

import pytest
from cli_support import agent, cases_file
from scripted_pipeline import BAGGAGE_CASE, PETS_CASE
from test_cli_train import training_steps

from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository

EXPGIT = [sys.executable, "-m", "expgit"]
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-7]|9[0-7]|38;[25])[;m]")


def train_args(serve: Any, repo: ExperienceRepository, tmp_path: Path) -> list[str]:
    # the held-out case twice: baseline, the proposal's candidate eval (the final eval of
    # the unchanged main is the baseline's: no rollout, no progress line)
    server = serve([*training_steps(repo), *(Step("rollout", agent) for _ in range(2))])
    return ["-C", str(tmp_path / "repo"), "train", "--cases",
            str(cases_file(tmp_path / "t.yaml", BAGGAGE_CASE, PETS_CASE)),
            "--eval-cases", str(cases_file(tmp_path / "e.yaml", PETS_CASE)),
            "--llm", "openai", "--base-url", server.url]


@pytest.mark.slow
def test_not_a_terminal_each_line_once_with_both_streams_joined(
        serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    proc = subprocess.run([*EXPGIT, *train_args(serve, seeded_repo, tmp_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0, proc.stdout
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == len(set(lines)), proc.stdout  # nothing printed twice
    for phase, epoch in (("baseline_eval", -1), ("train_epoch", 0), ("final_eval", 1)):
        assert len([x for x in lines if x.startswith(f"[{phase}] ")]) == 1
        assert len([x for x in lines if f"{phase} epoch={epoch}:" in x]) == (
            phase != "final_eval")  # reused: nothing ran
    progress = next(x for x in lines if x.startswith("expgit: train_epoch epoch=0: "))
    # the epoch counts the calls of the candidate eval it ran inside (1 rollout)
    # no [llm.prices]: the cost is unknown, not 0
    assert re.fullmatch(r"expgit: train_epoch epoch=0: 2/2 rollouts, 6 LLM calls, "
                        r"cost unknown, \d+\.\ds", progress)
    # first the estimate (before any call), then the first phase's line
    assert lines[0].startswith("expgit: estimate: 7 LLM calls, ~"), lines[0]
    assert "expgit: baseline_eval epoch=-1: 1/1 rollouts, 1 LLM calls" in lines[1]


def run_on_a_terminal(args: list[str], **env: str) -> tuple[str, str, int]:
    """Run with stderr on a pty (160 columns) and stdout on a pipe: (screen, stdout, rc)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    environ = {k: v for k, v in os.environ.items()
               if k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS", "CI")}
    environ |= {"TERM": "xterm-256color", "COLUMNS": "160", **env}
    proc = subprocess.Popen([*EXPGIT, *args], stdout=subprocess.PIPE,
                            stderr=slave, stdin=subprocess.DEVNULL, env=environ)
    os.close(slave)
    screen = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the slave side closed (EIO)
                return
            if not chunk:
                return
            screen.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    out, _ = proc.communicate(timeout=120)
    reader.join(timeout=60)
    os.close(master)
    return screen.decode("utf-8", "replace"), out.decode(), proc.returncode


@pytest.mark.slow
def test_a_terminal_gets_one_live_line_per_phase_and_json_stays_clean(
        serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    screen, out, code = run_on_a_terminal([*train_args(serve, seeded_repo, tmp_path),
                                           "--json"])
    assert code == 0, screen
    data = json.loads(out)  # stdout: the JSON object only
    assert [p["phase"] for p in data["phases"]] == ["baseline_eval", "train_epoch",
                                                    "candidate_eval", "final_eval"]
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen)
    for phase, epoch, done in (("baseline_eval", -1, "1/1"), ("train_epoch", 0, "2/2"),
                               ("candidate_eval", 0, "1/1")):
        assert re.search(rf"{phase} epoch={epoch}.*{done} rollouts\s+done\s+\d+ LLM calls"
                         rf"\s+cost unknown", text), text
    assert "final_eval" not in text  # the baseline's measurement: no live line
    assert "6 LLM calls" in text  # the training phase's, its candidate eval's included
    assert "expgit: train_epoch" not in text  # no plain lines on a terminal
    assert COLOUR.search(screen)  # coloured without NO_COLOR...
    assert "0.000000" not in text  # no price: unknown from the first frame, never 0


@pytest.mark.slow
def test_no_color_on_a_terminal(serve: Any, seeded_repo: ExperienceRepository,
                                tmp_path: Path) -> None:
    screen, out, code = run_on_a_terminal(train_args(serve, seeded_repo, tmp_path),
                                          NO_COLOR="1")
    assert code == 0, screen
    assert "train_epoch epoch=0" in screen and "LLM calls" in screen
    assert not COLOUR.search(screen)  # ...and not with it
    assert out.startswith("[baseline_eval] epoch=-1 cases=1")



class Recorder:
    """A RunObserver that records each event."""

    def __init__(self, totals: dict[str, int]) -> None:
        self.totals = totals
        self.events: list[tuple[Any, ...]] = []

    def phase_started(self, phase: str, epoch: int) -> None:
        self.events.append(("phase_started", phase, epoch))

    def stage(self, name: str) -> None:
        self.events.append(("stage", name))

    def rollout_done(self) -> None:
        self.events.append(("rollout_done",))

    def batch_done(self, phase: str, epoch: int, cases: int) -> None:
        self.events.append(("batch_done", phase, epoch, cases))

    def phase_done(self, metrics: Any) -> None:
        self.events.append(("phase_done", metrics.phase, metrics.cases))

    def priced(self, known: bool) -> None:
        self.events.append(("priced", known))

    def llm_started(self, stage: str) -> None:
        self.events.append(("llm_started", stage))

    def llm_counted(self, stage: str, total: Any) -> None:
        self.events.append(("llm_counted", stage, total.calls))


def test_the_pipeline_tells_each_rollout_stage_and_call(
        serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    import asyncio

    from expgit.runs.build import LLMOptions, RunOptions, run_eval

    server = serve([Step("rollout", agent), Step("rollout", agent)])
    made: list[Recorder] = []

    def factory(totals: dict[str, int]) -> Recorder:
        made.append(Recorder(totals))
        return made[-1]

    options = RunOptions(llm=LLMOptions(choice="openai", base_url=server.url),
                         concurrency=1, progress=factory)
    cases = cases_file(tmp_path / "e.yaml", BAGGAGE_CASE, PETS_CASE)
    report = asyncio.run(run_eval(seeded_repo, cases, options))
    assert report.usage.total.calls == 2
    [recorder] = made
    assert recorder.totals == {"eval": 2, "candidate_eval": 2}  # (--compare: both)
    assert recorder.events == [
        ("priced", False), ("phase_started", "eval", 0), ("stage", "rollout"),
        ("llm_started", "rollout"), ("llm_counted", "rollout", 1), ("rollout_done",),
        ("llm_started", "rollout"), ("llm_counted", "rollout", 2), ("rollout_done",),
        ("batch_done", "eval", 0, 2), ("phase_done", "eval", 2)]


def live_cost(progress: Any) -> str:
    [task] = progress._live.tasks
    return str(task.fields["cost"])


def test_the_live_line_says_unknown_before_the_first_call_without_a_price() -> None:
    from expgit.cli._progress import Progress
    from expgit.llm.port import StageUsage

    for known, shown in ((False, "unknown"), (True, "0.000000")):
        progress = Progress({"eval": 2}, tty=True)
        try:
            progress.priced(known)
            progress.phase_started("eval", 0)
            assert live_cost(progress) == shown  # drawn before any call is counted
            progress.llm_counted("rollout", StageUsage(calls=1, cost=0.5 if known else None))
            assert live_cost(progress) == ("0.500000" if known else "unknown")
        finally:
            progress.close()

