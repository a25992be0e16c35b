"""What every command shares: the repository from ``-C``, ``--json`` output, warnings."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from expgit.cli._json import json_printed, pretty_json
from expgit.store.refnames import Stray, describe_strays
from expgit.store.repository import ExperienceRepository, require_initialised

F = TypeVar("F", bound=Callable[..., Any])

json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print the result as one JSON object for scripts (its "
                                "fields: docs/json-output.md).")


def option_group(*options: Callable[[Any], Any]) -> Callable[[F], F]:
    """Several click options (or groups of them) as one decorator, listed in ``--help``
    in the order given, as if stacked."""
    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func
    return decorate


def open_repo(ctx: click.Context) -> ExperienceRepository:
    """The experience repository of the current folder (``-C`` has moved there); a git
    repository without a committed ``expgit.toml`` is refused with a hint to run
    ``expgit init``."""
    repo = ExperienceRepository.open(".")
    require_initialised(repo)
    return repo


def emit(as_json: bool, data: Any, human: Callable[[], None]) -> None:
    """Print ``data`` as JSON, or call ``human`` to print it for people."""
    if as_json:
        click.echo(pretty_json(data))
        json_printed.set(True)
    else:
        human()


def warn(messages: list[str]) -> None:
    for message in messages:
        click.echo(f"expgit: warning: {message}", err=True)


def skipped_strays(strays: list[Stray]) -> dict[str, Any]:
    """Say on stderr, in one line, which refs a listing skipped as not expgit's (nothing
    when none); return the ``--json`` field naming them (``[]`` when none)."""
    if strays:
        click.echo(f"expgit: {describe_strays(strays)}", err=True)
    return {"skipped": [s.as_dict() for s in sorted(set(strays), key=lambda s: s.ref)]}


def epoch(when: datetime | None) -> int | None:
    """A time as ``--json`` prints it: whole seconds since the epoch."""
    return None if when is None else int(when.timestamp())


def minute(stamp: int | datetime) -> str:
    """A time as the screen shows it: ``2026-01-31 12:34`` (seconds since the epoch:
    in UTC)."""
    when = stamp if isinstance(stamp, datetime) else datetime.fromtimestamp(stamp, UTC)
    return f"{when:%Y-%m-%d %H:%M}"


def short(sha: str | None) -> str:
    return sha[:12] if sha else "-"


def progress(message: str) -> None:
    """A progress line on stderr (stdout stays clean for --json)."""
    click.echo(message, err=True) if sys.stderr.isatty() else None
