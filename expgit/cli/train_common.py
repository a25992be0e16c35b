"""What ``expgit train``, ``eval`` and ``train-rollouts`` share: LLM options, progress,
and printing a run report."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import click

from expgit.cli._common import emit
from expgit.errors import ExpgitError
from expgit.train.build import LLMOptions
from expgit.train.pipeline import PhaseMetrics
from expgit.train.report import RunReport, phase_line, render_text, write_report

F = TypeVar("F", bound=Callable[..., Any])


def llm_options(func: F) -> F:
    """``--llm``, ``--model``, ``--base-url``, ``--concurrency``."""
    for option in reversed([
        click.option("--llm", "llm_choice", type=click.Choice(["local", "openai"]),
                     help="local: the embedded model; openai: an OpenAI-compatible endpoint "
                     "([llm] in expgit.toml, OPENAI_BASE_URL). Default: openai when an "
                     "endpoint is configured, else local."),
        click.option("--model", help="The model name (overrides [llm] model)."),
        click.option("--base-url", help="The endpoint URL, e.g. http://127.0.0.1:8080/v1 "
                     "(overrides [llm] base_url and OPENAI_BASE_URL)."),
        click.option("--concurrency", type=click.IntRange(min=1), default=4,
                     show_default=True, help="Cases and rollouts processed at once."),
    ]):
        func = option(func)
    return func


def make_llm_options(llm_choice: str | None, model: str | None, base_url: str | None
                     ) -> LLMOptions:
    choice: Literal["local", "openai"] | None = (
        "local" if llm_choice == "local" else "openai" if llm_choice == "openai" else None)
    return LLMOptions(choice=choice, model=model, base_url=base_url)


class Progress:
    """A progress bar per phase on a terminal (stderr), plain lines otherwise."""

    def __init__(self, totals: dict[str, int], *, tty: bool | None = None) -> None:
        self.totals = totals
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._bar: Any = None
        self._key: tuple[str, int] | None = None
        self._done = 0

    def batch_done(self, phase: str, epoch: int, cases: int) -> None:
        total = self.totals.get(phase, 0)
        if self._key != (phase, epoch):
            self._close()
            self._key, self._done = (phase, epoch), 0
            if self.tty:
                self._bar = click.progressbar(length=total or None, file=sys.stderr,
                                              label=f"{phase} epoch={epoch}")
                self._bar.__enter__()
        self._done += cases
        if self._bar is not None:
            self._bar.update(cases)
        else:
            click.echo(f"expgit: {phase} epoch={epoch}: {self._done}/{total} cases", err=True)

    def phase_done(self, metrics: PhaseMetrics) -> None:
        self._close()
        self._key = None
        if not self.tty:
            click.echo(f"expgit: {phase_line(metrics)}", err=True)

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


def output(report: RunReport, as_json: bool, report_file: Path | None = None) -> None:
    """Write ``--report``, print the run (text or JSON) on stdout; then fail (exit 1) if
    the run did not work (a phase whose every rollout failed)."""
    if report_file is not None:
        write_report(report, report_file)
    emit(as_json, report.model_dump(mode="json"),
         lambda: click.echo(render_text(report), nl=False))
    if report.problems:
        raise ExpgitError(report.problems[0], hint="check the model endpoint: --llm, "
                          "--base-url, [llm] in expgit.toml")
