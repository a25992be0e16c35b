"""The command line this process runs (``main``'s arguments, without the program), for
output that repeats it: e.g. the same ``train`` pointed at another model."""

from __future__ import annotations

from contextvars import ContextVar

command_args: ContextVar[tuple[str, ...]] = ContextVar("command_args", default=())
