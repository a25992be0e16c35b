"""SIGTERM to ``expgit serve`` while a job is in flight: the job finishes, the batch it
left waiting is merged (the trainer's close runs), the process exits 0, and nothing is
printed at ERROR level."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import git
from test_training_service_cli import first_line
from training_service_support import JSON, merge, reflect, topic_rollout

from expgit.llm.port import ChatMessages
from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository


def _slow(reply: Any, seconds: float) -> Any:
    def answer(messages: ChatMessages) -> str:
        time.sleep(seconds)  # the server thread answers late: the job is in flight
        return str(reply(messages))
    return answer


@pytest.mark.slow
def test_sigterm_with_a_job_in_flight_finishes_it(serve: Any,
                                                   seeded_repo: ExperienceRepository) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    server = serve([Step("reflect", _slow(reflect, 1.5)), Step("merge", merge)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "expgit", "-C", str(path), "serve", "--port", "0",
         "--mode", "propose", "--llm", "openai", "--base-url", server.url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = first_line(proc)
        posted = httpx.post(f"{url}/v1/train/rollouts",
                            content=topic_rollout("yak").model_dump_json(), headers=JSON)
        assert posted.status_code == 202, posted.text
        deadline = time.monotonic() + 30
        while not server.chat.calls:  # the analysis call has started
            assert time.monotonic() < deadline, "no LLM call was made"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "ERROR" not in err, err
    server.chat.assert_done()  # reflected on, and merged at shutdown
    branches = git(Path(path), "branch", "--list", "expgit/proposals/*").split()
    assert len(branches) == 1, err
    assert "yak-feeding" in git(Path(path), "show", "--stat", branches[0])
