"""``expgit sessions ingest|status|run``: the session hub."""

from __future__ import annotations

import asyncio
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

import click

from expgit.cli._common import emit, json_option, open_repo, warn
from expgit.cli._run_options import llm_options
from expgit.errors import UsageError
from expgit.sessions.formats.parse import FORMAT_NAMES, SessionFormat
from expgit.sessions.ingest.command import ingest
from expgit.sessions.ingest.discovery import TOOLS, Tool
from expgit.sessions.ingest.from_tools import ingest_from
from expgit.sessions.ingest.report import IngestReport
from expgit.sessions.status.counts import SessionsStatus, sessions_status

if TYPE_CHECKING:
    from expgit.sessions.report import SessionsRunReport


@click.group("sessions")
def sessions_group() -> None:
    """Agent sessions (.jsonl) -> task segments -> metrics -> experiences.

    State lives on the [sessions] branch (default expgit/sessions): one manifest per
    session, identifiers hashed, messages redacted before they are committed.

    \b
    Example:
      expgit sessions ingest sessions/*.jsonl
      expgit sessions run --llm openai
      expgit sessions status
    """


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"


def _print_ingest(report: IngestReport) -> None:
    for f in report.files:
        reason = f" ({f.status_reason})" if f.status_reason else ""
        segments = f"; {f.segmentation.segments} segments" if f.segmentation else ""
        sub = f" (sub-agent of session {f.parent_session})" if f.parent_session else ""
        click.echo(f"{f.file}{sub}: {f.outcome}, {f.messages} messages, {f.status}{reason}"
                   f"{segments}; redacted: {_counts(f.redactions)}")
    for note in report.notes:
        click.echo(f"note: {note}")
    if report.skill_loads:
        click.echo(f"skill loads: {report.skill_loads} ({report.unknown_skill_loads} naming "
                   f"no skill on main, {report.failed_skill_loads} failed)")
    if report.source is not None:
        click.echo(f"{report.source}: {len(report.files)} file(s) read, {report.not_read} "
                   f"unchanged since the last ingest (not read), in {report.folder}")
    click.echo(f"commit: {report.commit[:12] if report.commit else 'none (nothing changed)'}"
               f" on {report.branch}")


@sessions_group.command("ingest")
@click.argument("files", nargs=-1, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--from", "tool", type=click.Choice(list(TOOLS)),
              help="Find the sessions this tool wrote, in its default folder "
              "(claude-code: $CLAUDE_CONFIG_DIR/projects or ~/.claude/projects; codex: "
              "$CODEX_HOME/sessions or ~/.codex/sessions), instead of naming FILES.")
@click.option("--path", "folder", type=click.Path(path_type=Path, file_okay=False),
              help="With --from: search this folder instead of the default one.")
@click.option("--since", type=click.DateTime(["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S",
                                             "%Y-%m-%d %H:%M:%S"]), metavar="DATE",
              help="With --from: only files modified at or after DATE (2026-11-30 or "
              "2026-11-30T09:00:00, local time).")
@click.option("--agent", help="The id of the agent that wrote these sessions.")
@click.option("--format", "session_format", default="auto", show_default=True,
              type=click.Choice(FORMAT_NAMES),
              help="The row format of the files; auto detects it per file.")
@json_option
@click.pass_context
def ingest_cmd(ctx: click.Context, files: tuple[Path, ...], tool: str | None,
               folder: Path | None, since: datetime | None, agent: str | None,
               session_format: str, as_json: bool) -> None:
    """Record session FILES (.jsonl) on the sessions branch, redacted; or, with --from,
    the sessions a tool wrote that changed since the last ingest.

    An unchanged file changes nothing. A session of at most two messages is one segment
    at once; longer ones are pending until `expgit sessions run` segments them. Blank and
    invalid lines are counted and reported, never fatal. A file of no known format stops
    the ingest, naming its first offending line, with nothing stored; with --from it is
    reported and skipped, and a file still being written is left for the next ingest.

    \b
    Example:
      expgit sessions ingest sessions/*.jsonl --agent support-bot
      expgit sessions ingest --from claude-code --since 2026-11-30
      expgit sessions ingest --from codex --path ~/work/codex-home/sessions --json
    """
    fmt = cast(SessionFormat, session_format)
    if tool is None:
        if not files:
            raise UsageError("name session FILES, or --from claude-code|codex")
        if folder is not None or since is not None:
            raise UsageError("--path and --since go with --from")
        report = asyncio.run(ingest(open_repo(ctx), list(files), agent=agent,
                                    session_format=fmt))
    else:
        if files:
            raise UsageError("--from finds the files: name no FILES with it")
        report = asyncio.run(ingest_from(open_repo(ctx), cast(Tool, tool), path=folder,
                                         since=since, agent=agent, session_format=fmt))
    warn([f"{f.file}: {len(f.invalid_lines)} invalid line(s) skipped: "
          + ", ".join(map(str, f.invalid_lines[:20]))
          + (" ..." if len(f.invalid_lines) > 20 else "")
          for f in report.files if f.invalid_lines and f.outcome != "unrecognized"]
         + [f"{f.file}: {f.status_reason}" for f in report.files
            if f.outcome in ("unrecognized", "incomplete", "not_regular")]
         + [f"{f.file}: line {f.truncated_line} is incomplete (still being written?): "
            "skipped" for f in report.files
            if f.truncated_line is not None and f.outcome != "incomplete"])
    emit(as_json, report.model_dump(mode="json"), lambda: _print_ingest(report))


def _print_status(status: SessionsStatus) -> None:
    click.echo(f"sessions: {status.sessions} ({_counts(status.by_status)}) on {status.branch}")
    click.echo(f"segments: {status.segments} active, {status.superseded} superseded; "
               f"labelled {status.labelled}, memory-eligible {status.memory_eligible}, "
               f"SFT-eligible {status.sft_eligible}, trained {status.trained}")
    for line in status.pending:
        click.echo(f"pending {line.session}: {line.status_reason or ''}")
    for pid in status.invalidation_proposals:
        click.echo(f"invalidation proposal: {pid} (review it with `expgit review {pid}`)")


@sessions_group.command("status")
@click.option("--all", "all_details", is_flag=True,
              help="List every session in the JSON `details` (default: the first 100 "
              "by key, `details_truncated` true when there are more).")
@json_option
@click.pass_context
def status_cmd(ctx: click.Context, all_details: bool, as_json: bool) -> None:
    """Sessions, segments, labelled, memory-eligible, SFT-eligible and trained counts.

    \b
    Example:
      expgit sessions status
      expgit sessions status --json
      expgit sessions status --json --all
    """
    status = sessions_status(open_repo(ctx), all_details=all_details)
    emit(as_json, status.model_dump(mode="json"), lambda: _print_status(status))


def _print_run(report: SessionsRunReport) -> None:
    click.echo(f"segmented: {len(report.segmented)} sessions; pending: {len(report.pending)}; "
               f"superseded: {len(report.superseded)} segments")
    click.echo(f"labelled: {len(report.labelled)}; trained: {len(report.trained)}; "
               f"gradients: {len(report.gradients)}")
    for pid in report.proposals:
        click.echo(f"proposal: {pid} (branch expgit/proposals/{pid})")
    for pid in report.invalidation_proposals:
        click.echo(f"invalidation proposal: {pid} (branch expgit/proposals/{pid})")
    for key, reason in report.pending.items():
        click.echo(f"pending {key}: {reason}")
    for line in report.notes:
        click.echo(f"note: {line}")
    total = report.usage.total
    click.echo(f"LLM: {report.llm_description or 'none'}; {total.calls} calls, "
               f"{total.prompt_tokens + total.completion_tokens} tokens")


@sessions_group.command("run")
@click.option("--batch-size", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many sessions segmented, segments labelled and segments "
              "trained.")
@click.option("--mode", type=click.Choice(["propose", "apply"]), default="propose",
              show_default=True, help="propose: stop at a proposal branch, main untouched; "
              "apply: apply the proposal to main.")
@partial(llm_options, concurrency_help="Sessions segmented, and segments labelled or "
         "trained, at once.")
@json_option
@click.pass_context
def run_cmd(ctx: click.Context, batch_size: int, mode: str, llm_choice: str | None,
            model: str | None, base_url: str | None, concurrency: int, as_json: bool
            ) -> None:
    """Segment the pending sessions, label their segments with trajectory metrics and
    train the memory-eligible ones into a proposal. Without an LLM, nothing is done and
    sessions stay pending.

    \b
    Example:
      expgit sessions run                       # propose: main is not touched
      expgit sessions run --batch-size 10 --mode apply --llm openai --model gpt-4o-mini
    """
    # the LLM and training stacks load only here: `sessions status` and `ingest` stay light
    from expgit.cli.train_common import make_llm_options
    from expgit.sessions.run import run_with_llm

    report = asyncio.run(run_with_llm(
        open_repo(ctx), make_llm_options(llm_choice, model, base_url),
        batch_size=batch_size, mode=cast(Literal["propose", "apply"], mode),
        concurrency=concurrency, progress=lambda line: click.echo(f"expgit: {line}",
                                                                  err=True)))
    warn(report.errors)
    emit(as_json, report.model_dump(mode="json"), lambda: _print_run(report))
