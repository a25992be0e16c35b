"""What reaches a terminal: no control sequence that a model or a session wrote.

A model's rationale, an edit, a session's text or a trajectory may hold terminal control
sequences: an OSC 8 hyperlink that disguises where it points
(``\\x1b]8;;http://evil\\x1b\\\\click\\x1b]8;;\\x1b\\\\``), a CSI that clears the screen or
moves the cursor to overwrite a line, a window-title OSC, BEL, or their 8-bit C1 forms.
:func:`terminal_text` removes every such sequence and every other C0 and C1 control
character but the newline and the tab; the visible text stays.

Applied in one place, the command line's output streams (:func:`safe_terminal`, around
every command in :func:`expgit.cli.main`): whatever a command prints, on stdout or stderr,
passes through it. On a terminal with colours on, the few colour sequences expgit itself
writes (``click.style``: bold, red, green, yellow, cyan, reset) are kept; nothing else is.
This is the choice git made for what a remote prints (its sideband messages): colour
passes, other control characters do not. ``--json`` output is unaffected: JSON escapes
control characters itself.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

_ST = r"(?:\x07|\x1b\\|\x9c)"  # a string's terminator: BEL, ESC \, or 8-bit ST
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI (cursor, erase, colour...)
    rf"|\x1b\][^\x07\x1b\x9c\n]*{_ST}?"  # OSC (hyperlinks, window title), to its end
    rf"|\x1b[PX^_][^\x1b\x9c\n]*{_ST}?"  # DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]?"  # any other escape sequence, or a lone ESC
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    rf"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c\n]*{_ST}?"  # 8-bit DCS, SOS, OSC, PM, APC
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # the other C0 controls (not \t, \n), DEL, C1
_OWN_STYLE = re.compile(r"\x1b\[(?:0|1|22|3[1-6]|39)m")  # what expgit's click.style writes


def terminal_text(text: str, *, keep_colours: bool = False) -> str:
    """``text`` without control sequences or control characters (``\\n`` and ``\\t``
    kept); ``keep_colours``: expgit's own colour sequences are kept."""
    if keep_colours:
        return _CONTROL.sub(lambda m: m.group() if _OWN_STYLE.fullmatch(m.group()) else "",
                            text)
    return _CONTROL.sub("", text)


class TerminalStream:
    """A text stream that writes :func:`terminal_text` of every string to ``inner``;
    anything else (``isatty``, ``buffer``, ``encoding``...) is ``inner``'s."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, data: Any) -> int:
        if isinstance(data, str):
            colours = bool(getattr(self.inner, "isatty", lambda: False)())
            self.inner.write(terminal_text(data, keep_colours=colours))
            return len(data)
        return int(self.inner.write(data))  # bytes: a text stream refuses them

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextmanager
def safe_terminal() -> Iterator[None]:
    """sys.stdout and sys.stderr pass through :class:`TerminalStream` inside; restored
    after (unless something else replaced them meanwhile)."""
    saved = sys.stdout, sys.stderr
    ours = [TerminalStream(s) if not isinstance(s, TerminalStream) else s for s in saved]
    sys.stdout, sys.stderr = ours[0], ours[1]
    try:
        yield
    finally:
        if sys.stdout is ours[0]:
            sys.stdout = saved[0]
        if sys.stderr is ours[1]:
            sys.stderr = saved[1]
