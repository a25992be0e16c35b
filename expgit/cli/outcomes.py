"""``expgit outcomes add|list``: typed outcome records (analytics only, never on main)."""

from __future__ import annotations

from typing import cast

import click
from pydantic import ValidationError

from expgit.cli._common import emit, epoch, json_option, minute, open_repo
from expgit.errors import InvalidInputError
from expgit.outcomes.records import (
    TARGET_KINDS,
    VERDICTS,
    OutcomeRecord,
    OutcomeRequest,
    TargetKind,
)
from expgit.outcomes.store import OutcomeStore

_kind = click.Choice(TARGET_KINDS)


@click.group("outcomes")
def outcomes_group() -> None:
    """Typed outcomes: a verdict on a rollout, trajectory, experience or proposal.

    Outcomes are analytics only: they live on the outcomes branch ([outcomes] branch,
    default expgit/outcomes), never on main, and never reach the agent.

    \b
    Example:
      expgit outcomes add --target-kind experience --target refund-method-rules \\
        --verdict helpful --score 0.9 --idempotency-key review-42
      expgit outcomes list --target-kind experience --json
    """


@outcomes_group.command("add")
@click.option("--target-kind", required=True, type=_kind, help="What the outcome is about.")
@click.option("--target", "target_id", required=True, metavar="ID",
              help="rollout: 16-hex rollout id; trajectory: URI or id; experience: name; "
                   "proposal: id (a unique prefix will do).")
@click.option("--verdict", required=True, type=click.Choice(VERDICTS),
              help="helpful/pass count as positive, harmful/fail as negative.")
@click.option("--score", required=True, type=click.FloatRange(0, 1), help="From 0 to 1.")
@click.option("--reason", default="", help="Why, in a sentence.")
@click.option("--source", default="cli", show_default=True,
              help="Who judged: a person, an agent, a benchmark...")
@click.option("--idempotency-key", "key", required=True, metavar="KEY",
              help="Unique per outcome: running the same command again records nothing "
                   "new; the same key with other values is refused (exit 3).")
@json_option
@click.pass_context
def add_cmd(ctx: click.Context, target_kind: str, target_id: str, verdict: str, score: float,
            reason: str, source: str, key: str, as_json: bool) -> None:
    """Record an outcome. The target must exist (exit 5 if not) and be of that kind
    (exit 3 if the id names another kind of target).

    \b
    Example:
      expgit outcomes add --target-kind experience --target refund-method-rules \\
        --verdict helpful --score 0.9 --reason 'the refund was right' \\
        --idempotency-key ticket-1234
      expgit outcomes add --target-kind proposal --target 3f2a9c1b7d4e --verdict fail \\
        --score 0 --source ci --idempotency-key ci-run-77
    """
    try:
        request = OutcomeRequest.model_validate({
            "target_kind": target_kind, "target_id": target_id, "verdict": verdict,
            "score": score, "reason": reason, "source": source})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInputError(f"--{str(first['loc'][0]).replace('_', '-')}: "
                                f"{first['msg']}") from None
    record, created = OutcomeStore(open_repo(ctx)).add(request, key)
    emit(as_json, {"created": created, "outcome": _view(record)},
         lambda: click.echo(f"{'Recorded' if created else 'Already recorded'} outcome "
                            f"{record.id}: {_line(record)}"))


@outcomes_group.command("list")
@click.option("--target-kind", type=_kind, help="Only outcomes about this kind of target.")
@click.option("--target", "target_id", metavar="ID",
              help="Only outcomes about this target (needs --target-kind).")
@json_option
@click.pass_context
def list_cmd(ctx: click.Context, target_kind: str | None, target_id: str | None,
             as_json: bool) -> None:
    """List outcome records, oldest first.

    \b
    Example:
      expgit outcomes list
      expgit outcomes list --target-kind experience --target refund-method-rules --json
    """
    records = OutcomeStore(open_repo(ctx)).select(cast(TargetKind | None, target_kind),
                                                  target_id)

    def human() -> None:
        for record in records:
            click.echo(f"{record.id}  {minute(record.created_at)}  {_line(record)}")
        click.echo(f"{len(records)} outcomes", err=True)

    emit(as_json, {"outcomes": [_view(r) for r in records]}, human)


def _view(record: OutcomeRecord) -> dict[str, object]:
    """The stored record, its ``created_at`` in seconds since the epoch (as every time
    in ``--json`` output; the record on the outcomes branch keeps ISO 8601)."""
    return record.model_dump(mode="json") | {"created_at": epoch(record.created_at)}


def _line(record: OutcomeRecord) -> str:
    reason = f" - {record.reason}" if record.reason else ""
    return (f"{record.verdict} {record.score:.2f} on {record.target_kind} "
            f"{record.target_id} (by {record.source}){reason}")
