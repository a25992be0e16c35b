"""A run's progress on stderr (stdout stays for the result and ``--json``).

On a terminal: one live line per phase, drawn by rich (imported only then): rollouts
done/total, the current stage, the phase's LLM calls and cost so far, elapsed time; a
finished phase's line stays as it ended. rich honours ``NO_COLOR`` (and ``TERM=dumb``).
Not a terminal: a plain line per finished batch, each printed once (the phase lines
themselves are the result, printed on stdout once)::

    expgit: train_epoch epoch=0: 2/2 rollouts, 7 LLM calls, cost 0.004210, 0.4s

(``cost unknown``, on the live line too and from its start, when the model has no price
in ``[llm.prices]``.)
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import click

from expgit.llm.budget import money
from expgit.llm.port import StageUsage, add_cost
from expgit.train.measurement.phase_metrics import PhaseMetrics


@dataclass
class _Phase:
    name: str
    epoch: int
    total: int
    calls_before: int  # the run's LLM calls and cost when the phase started
    cost_before: float | None
    started: float = field(default_factory=time.monotonic)
    done: int = 0  # rollouts done: told one by one, or by the batch
    batched: int = 0  # the cases of the batches done
    task: Any = None  # its rich task id, on a terminal


class Progress:
    """A run's observer (``RunObserver``): live lines on a terminal, plain ones else."""

    def __init__(self, totals: dict[str, int], *, tty: bool | None = None) -> None:
        self.totals = totals
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._lock = threading.Lock()
        self._usage = StageUsage()
        # the phases under way, innermost last (a proposal's candidate_eval runs inside
        # its train_epoch): events go to the innermost, a batch to the phase it names
        self._phases: list[_Phase] = []
        self._live: Any = None  # rich.progress.Progress, started with the first phase

    # the pipeline's events
    def phase_started(self, phase: str, epoch: int) -> None:
        with self._lock:
            current = _Phase(phase, epoch, self.totals.get(phase, 0), self._usage.calls,
                             self._usage.cost)
            self._phases.append(current)
            if self.tty:
                current.task = self._display().add_task(
                    f"{phase} epoch={epoch}", total=current.total or None, stage="rollout",
                    calls=0, cost=self._cost(current))

    def stage(self, name: str) -> None:
        self._update(stage=name)

    def rollout_done(self) -> None:
        with self._lock:
            if self._phases:
                self._phases[-1].done += 1
        self._update()

    def batch_done(self, phase: str, epoch: int, cases: int) -> None:
        with self._lock:
            current = next((p for p in reversed(self._phases)
                            if (p.name, p.epoch) == (phase, epoch)), None)
            if current is None:
                return
            # right also when the executor did not tell of each rollout
            current.batched += cases
            current.done = max(current.done, current.batched)
            line = self._plain(current)
        if self.tty:
            self._update()
        else:
            click.echo(line, err=True)

    def phase_done(self, metrics: PhaseMetrics) -> None:
        with self._lock:
            current = next((p for p in reversed(self._phases)
                            if (p.name, p.epoch) == (metrics.phase, metrics.epoch)), None)
            if current is not None:
                self._phases.remove(current)
        if current is not None and current.task is not None and self._live is not None:
            self._live.update(current.task, stage="done", completed=current.done)
            self._live.stop_task(current.task)

    # the LLM calls (the usage meter's listener)
    def priced(self, known: bool) -> None:
        """Before any call: without a price the cost is unknown from the start, not 0."""
        with self._lock:
            self._usage = self._usage.model_copy(update={"cost": 0.0 if known else None})

    def llm_started(self, stage: str) -> None:
        self._update(stage=stage)

    def llm_counted(self, stage: str, total: StageUsage) -> None:
        with self._lock:
            self._usage = total
        self._update()

    def close(self) -> None:
        """Stop the live display (the lines stay on the terminal)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    # drawing
    def _plain(self, current: _Phase) -> str:
        calls = self._usage.calls - current.calls_before
        total = current.total or current.done
        return (f"expgit: {current.name} epoch={current.epoch}: {current.done}/{total} "
                f"rollouts, {calls} LLM calls, cost {self._cost(current)}, "
                f"{time.monotonic() - current.started:.1f}s")

    def _cost(self, current: _Phase) -> str:
        """The phase's cost so far (``unknown`` once a call had no price)."""
        before = None if current.cost_before is None else -current.cost_before
        return money(add_cost(self._usage.cost, before), None)

    def _update(self, **fields: Any) -> None:
        with self._lock:
            current = self._phases[-1] if self._phases else None
            if current is None or current.task is None or self._live is None:
                return
            self._live.update(current.task, completed=current.done,
                              calls=self._usage.calls - current.calls_before,
                              cost=self._cost(current), **fields)

    def _display(self) -> Any:
        if self._live is None:
            from rich.console import Console  # only when a live display is shown
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as LiveProgress

            self._live = LiveProgress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("rollouts"), TextColumn("[cyan]{task.fields[stage]:<8}"),
                TextColumn("{task.fields[calls]} LLM calls"),
                TextColumn("cost {task.fields[cost]}"), TimeElapsedColumn(),
                console=Console(stderr=True), redirect_stdout=False)
            self._live.start()
        return self._live


@contextmanager
def progress_display(*, tty: bool | None = None) -> Iterator[ProgressFactory]:
    """The run's progress factory (``RunOptions.progress``); its displays stop on exit."""
    factory = ProgressFactory(tty=tty)
    try:
        yield factory
    finally:
        for made in factory.made:
            made.close()


class ProgressFactory:
    def __init__(self, *, tty: bool | None = None) -> None:
        self.tty = tty
        self.made: list[Progress] = []

    def __call__(self, totals: dict[str, int]) -> Progress:
        made = Progress(totals, tty=self.tty)
        self.made.append(made)
        return made
