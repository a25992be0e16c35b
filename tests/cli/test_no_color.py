"""``NO_COLOR``: a command that colours its output on a terminal (``review``'s diff, ``log``)
prints no ANSI colour when ``NO_COLOR`` is set, and still does without it, as a real
process with its stdout and stderr on a pty. (The live progress line's is
tests/cli/test_progress.py's.)"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

import pytest
from conftest import Driver, example_flat

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def on_a_terminal(args: list[str], **env: str) -> tuple[str, int]:
    """``python -m expgit ARGS`` with stdout and stderr on a pty: (what it showed, rc)."""
    master, slave = pty.openpty()
    environ = {k: v for k, v in os.environ.items()
               if k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "CI")}
    environ |= {"TERM": "xterm-256color", **env}
    proc = subprocess.Popen([sys.executable, "-m", "expgit", *args], stdout=slave,
                            stderr=slave, stdin=subprocess.DEVNULL, env=environ)
    os.close(slave)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the pty (EIO)
            break
        if not chunk:
            break
        shown.extend(chunk)
    os.close(master)
    return shown.decode("utf-8", "replace"), proc.wait(timeout=60)


@pytest.mark.slow
def test_review_and_log_print_no_colour_with_no_color(driver: Driver) -> None:
    name = "checked-baggage-allowance"
    text = example_flat(name)
    pid = driver.merge(driver.propose(name, text + "\nCheck the fare class first.\n"))
    driver.apply(pid)
    for args in (["review", pid], ["log"]):
        command = ["-C", str(driver.path), *args]
        coloured, code = on_a_terminal(command)
        assert code == 0, coloured
        assert ANSI.search(coloured), coloured  # a terminal gets colour...
        plain, code = on_a_terminal(command, NO_COLOR="1")
        assert code == 0, plain
        assert not ANSI.search(plain), plain  # ...unless NO_COLOR says no
        assert plain.replace("\r\n", "\n") == ANSI.sub("", coloured).replace("\r\n", "\n")
    empty, _ = on_a_terminal(["-C", str(driver.path), "log"], NO_COLOR="")
    assert ANSI.search(empty)  # set but empty: no-color.org says colour stays


def test_the_http_servers_log_without_colour_under_no_color(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from starlette.applications import Starlette

    from expgit.asgi.server import _config

    assert _config(Starlette()).use_colors is None  # uvicorn's own: colour on a terminal
    monkeypatch.setenv("NO_COLOR", "1")
    assert _config(Starlette()).use_colors is False
