"""The snippets of a documentation page (README.md, docs/*.md), read and run in order.

A page's ``sh`` and ``python`` fences run, in the order shown, in ONE bash session
(``set -euo pipefail``) started in a fresh temporary folder that holds what a clone has
(``example_repo/``, ``scripts/``, ``examples/``); a ``python`` fence runs as
``python3 FILE`` at its place, in the session's current folder. ``expgit`` and
``python3`` are this interpreter. The LLM is a local OpenAI-compatible server answering
from a strict script (tests/script_server.py), set through ``OPENAI_BASE_URL``: every
scripted reply must be used and no other call made. No network.

Every fence names its language. The languages:

- run: ``sh``, ``python``;
- parsed, so they stay valid: ``toml``, ``json``, ``jsonl`` (each line), ``yaml``;
- shown, never run: ``text`` (an output sample, a command with placeholders),
  ``console``, ``markdown``.

Markers, an HTML comment on the line right before a ``sh`` or ``python`` fence:

- ``<!-- not-run: REASON -->``: the block is not run (it installs, it needs a service
  the tests do not have, it is for another shell). The reason is required, and
  tests/test_docs.py's NOT_RUN counts them per page, so a skip cannot grow silently.
- ``<!-- run: background -->``: the block is one command that starts a server. It runs
  in the background; the next block runs once the URL it prints answers ``/health``.
  The servers are stopped (SIGTERM, then waited for) after the last block.

The ports 8765 and 8766 of the snippets are replaced by free ports.
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

import yaml
from conftest import ROOT
from script_server import ScriptServer
from scripted_pipeline import layout_reflect, layout_reply

from expgit.llm.scripted import Reply, ScriptedChatModel, Step
from expgit.sessions.metrics import METRIC_NAMES

FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!-- (?:run: (?P<background>background)|not-run: (?P<reason>\S.*?)) -->$")
RUN = frozenset({"sh", "python"})
PARSED = frozenset({"toml", "json", "jsonl", "yaml"})
SHOWN = frozenset({"text", "console", "markdown"})
PORTS = ("8765", "8766")
CLONE = ("example_repo", "scripts", "examples")


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str | None  # "background", "not-run: REASON" or None

    @property
    def first(self) -> str:
        return self.text.splitlines()[0] if self.text else ""

    @property
    def runs(self) -> bool:
        return self.lang in RUN and not (self.marker or "").startswith("not-run")


def blocks(text: str, page: str = "page") -> list[Block]:
    """The fenced blocks of ``text``, in order; a malformed marker is an AssertionError."""
    found: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index].lstrip())
        if opening is None:
            index += 1
            continue
        indent = len(lines[index]) - len(lines[index].lstrip())
        end = next(i for i in range(index + 1, len(lines))
                   if lines[i].lstrip().startswith("```"))
        before = lines[index - 1].strip() if index else ""
        marker = MARKER.match(before)
        assert marker or not re.match(r"<!-- (run|not-run|readme)\b", before), \
            f"{page} line {index}: malformed marker {before!r}"
        kind = None
        if marker:
            kind = "background" if marker["background"] else f"not-run: {marker['reason']}"
        body = "\n".join(line[indent:] for line in lines[index + 1:end])
        found.append(Block(index + 1, opening.group(1), body, kind))
        index = end + 1
    return found


def check_fences(found: list[Block], page: str) -> None:
    """Every fence names a known language; parsed ones parse; markers sit on run ones."""
    for block in found:
        where = f"{page} line {block.line}"
        assert block.lang in RUN | PARSED | SHOWN, \
            f"{where}: fence language {block.lang!r} is none of {sorted(RUN | PARSED | SHOWN)}"
        assert block.marker is None or block.lang in RUN, \
            f"{where}: a marker belongs before a sh or python fence"
        if block.lang == "toml":
            tomllib.loads(block.text)
        elif block.lang == "json":
            json.loads(block.text)
        elif block.lang == "jsonl":
            for line in block.text.splitlines():
                json.loads(line)
        elif block.lang == "yaml":
            list(yaml.safe_load_all(block.text))


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


def script(calls: dict[str, int]) -> ScriptedChatModel:
    return ScriptedChatModel([Step(stage, REPLIES[stage])
                              for stage, count in calls.items() for _ in range(count)])


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


PRELUDE = r"""
set -euo pipefail
__docs_servers=()
__docs_stop() {
  for pid in "${__docs_servers[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${__docs_servers[@]}"; do wait "$pid" || true; done
}
trap __docs_stop EXIT
__docs_wait() {  # LOG PID PORT: until the server printed its URL and it answers /health
  for _ in $(seq 600); do
    if grep -q "http://127.0.0.1:$3" "$1" && curl -sf "http://127.0.0.1:$3/health" > /dev/null
    then return 0; fi
    kill -0 "$2" 2> /dev/null || { echo "the server exited" >&2; cat "$1" >&2; return 1; }
    sleep 0.1
  done
  echo "the server did not answer /health within 60 s" >&2; cat "$1" >&2; return 1
}
"""


def compose(runnable: list[tuple[int, Block]], logs: Path, ports: dict[str, str],
            page: str) -> str:
    parts = [PRELUDE]
    for number, block in runnable:
        text = block.text
        for old, new in ports.items():
            text = re.sub(rf"\b{old}\b", new, text)
        out, err = logs / f"{number}.out", logs / f"{number}.err"
        parts.append(f"echo {number} > {shlex.quote(str(logs / 'current'))}")
        parts.append(f"exec > {shlex.quote(str(out))} 2> {shlex.quote(str(err))}")
        if block.lang == "python":
            source = logs / f"{number}.py"
            source.write_text(text + "\n")
            parts.append(f"python3 {shlex.quote(str(source))}")
        elif block.marker == "background":
            assert "\n" not in text.strip(), f"{page} line {block.line}: a background " \
                                             "block is one command"
            log = shlex.quote(str(logs / f"{number}.server"))
            parts.append(f"( exec {text.strip()} ) > {log} 2>&1 &")
            parts.append("__docs_servers+=($!)")
            port = re.search(r"--port (\d+)", text)
            assert port, f"{page} line {block.line}: a background block names its --port"
            parts.append(f"__docs_wait {log} $! {port.group(1)}")
        else:
            parts.append(text)
    parts.append(f"echo done > {shlex.quote(str(logs / 'current'))}")
    return "\n".join(parts) + "\n"


def tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return "(none)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def environment(home: Path, bin_dir: Path, temp: Path, server: ScriptServer
                ) -> dict[str, str]:
    """``expgit`` and ``python3`` run this interpreter; the model is ``server``; git knows
    who the user is, as on a user's machine."""
    for name, module in (("expgit", "-m expgit"), ("python3", "")):
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {module} "$@"\n')
        wrapper.chmod(0o755)
    (home / ".gitconfig").write_text("[user]\n\tname = Docs Reader\n\temail = reader@example.com\n")
    keep = {k: v for k, v in os.environ.items()
            if k.startswith("GIT_") or k in ("PYTHONPATH", "LANG", "LC_ALL")}
    return {**keep, "HOME": str(home), "TMPDIR": str(temp),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "scripted", "NO_COLOR": "1"}


def used(chat: ScriptedChatModel, calls: dict[str, int]) -> dict[str, int]:
    counts = Counter(stage for stage, _, _ in chat.calls)
    return {stage: counts.get(stage, 0) for stage in calls} | dict(counts)


def run_page(page: Path, calls: dict[str, int], tmp_path: Path) -> None:
    """Runs ``page``'s snippets in order in a fresh sandbox; the LLM calls they make, by
    stage, must be exactly ``calls``."""
    name = str(page.relative_to(ROOT))
    found = blocks(page.read_text(encoding="utf-8"), name)
    check_fences(found, name)
    runnable = [(n, b) for n, b in enumerate(found, 1) if b.runs]
    work, logs, bin_dir, home, temp = (tmp_path / d for d in ("work", "logs", "bin", "home",
                                                               "tmp"))
    for folder in (work, logs, bin_dir, home, temp):
        folder.mkdir()
    for part in CLONE:
        shutil.copytree(ROOT / part, work / part)
    chat = script(calls)
    server = ScriptServer(chat)
    ports = {port: free_port() for port in PORTS}
    (tmp_path / "page.sh").write_text(compose(runnable, logs, ports, name))
    try:
        proc = subprocess.Popen(["bash", str(tmp_path / "page.sh")], cwd=work,
                                env=environment(home, bin_dir, temp, server),
                                start_new_session=True)
        try:
            code = proc.wait(timeout=900)
        finally:
            with contextlib.suppress(ProcessLookupError):  # what is left of the session
                os.killpg(proc.pid, signal.SIGTERM)
    finally:
        server.close()
    current = (logs / "current").read_text().strip() if (logs / "current").exists() else ""
    if current != "done" or code != 0:
        number = int(current) if current.isdigit() else 0
        block = found[number - 1] if number else None
        where = (f"{name} block {number} (line {block.line}: {block.first!r})"
                 if block else f"the runner of {name}")
        raise AssertionError(
            f"{where} failed with exit {code}\n--- stdout (tail) ---\n"
            f"{tail(logs / f'{number}.out')}\n--- stderr (tail) ---\n"
            f"{tail(logs / f'{number}.err')}\nLLM calls so far: {used(chat, calls)}; "
            f"unexpected: {server.unexpected[:3]}")
    for log in sorted(logs.glob("*.server")):
        assert "Traceback" not in log.read_text(), f"{log.name}:\n{tail(log)}"
    assert server.unexpected == [], (used(chat, calls), server.unexpected[:3])
    assert used(chat, calls) == calls, \
        f"{name}: LLM calls by stage: {used(chat, calls)}, scripted: {calls}"
    chat.assert_done()
