from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import click

from expgit.cli._common import emit, json_option, minute, open_repo, short, skipped_strays
from expgit.cli._complete import open_ids
from expgit.cli._views import gradient_view, proposal_view
from expgit.store.refnames import Stray
from expgit.store.workflow.changes import FileChange, colour_diff
from expgit.store.workflow.gradients import list_gradients
from expgit.store.workflow.proposals import Proposal, hunks, list_proposals, open_proposal_gradients
from expgit.store.workflow.review import find_any, read_note, reject

STATE_CHOICE = click.Choice(["open", "applied", "rejected", "all"])


def _states(state: str) -> tuple[str, ...]:
    return ("open", "applied", "rejected") if state == "all" else (state,)


@click.command("gradients")
@click.option("--state", type=STATE_CHOICE, default="open", show_default=True,
              help="Which gradients: open (neither applied nor rejected), applied, rejected, "
                   "or all.")
@click.option("--merged", "with_merged", is_flag=True,
              help="Also list the open gradients already merged into an open proposal "
                   "(hidden by default: review that proposal instead).")
@json_option
@click.pass_context
def gradients_cmd(ctx: click.Context, state: str, with_merged: bool, as_json: bool) -> None:
    """List gradients: one proposed edit each, with confidence and rationale.

    Each open gradient merged into an open proposal names it (in JSON: "proposal"); they
    are left out unless --merged is given (in JSON: "hidden_merged" counts them).

    \b
    Example:
      expgit gradients                 # the gradients no proposal holds yet
      expgit gradients --merged --json # every open one, each with its proposal
    """
    repo = open_repo(ctx)
    holding = open_proposal_gradients(repo)
    strays: list[Stray] = []
    items = list_gradients(repo, _states(state), strays=strays)
    skipped = skipped_strays(strays)
    hidden = 0 if with_merged else sum(1 for g in items if g.commit in holding)
    if hidden:
        items = [g for g in items if g.commit not in holding]

    def human() -> None:
        if not items:
            click.echo(f"no {state} gradients")
        for g in items:
            added, removed = g.change.counts
            where = f"  in proposal {holding[g.commit]}" if g.commit in holding else ""
            click.echo(f"{g.id}  {g.state:<8} {g.operation:<6} {g.target:<40} "
                       f"+{added}/-{removed}  conf {g.confidence:.2f}  "
                       f"{g.rationale.splitlines()[0][:60] if g.rationale else ''}{where}")
        if hidden:
            click.echo(f"({hidden} more, merged into open proposals: --merged lists them)",
                       err=True)

    emit(as_json, {"gradients": [gradient_view(g) | {"proposal": holding.get(g.commit)}
                                 for g in items], "hidden_merged": hidden, **skipped}, human)


@click.command("proposals")
@click.option("--state", type=STATE_CHOICE, default="open", show_default=True,
              help="Which proposals: open (waiting for review), applied, rejected, or all.")
@json_option
@click.pass_context
def proposals_cmd(ctx: click.Context, state: str, as_json: bool) -> None:
    """List proposals: merged gradients waiting for review (or applied, or rejected).

    \b
    Example:
      expgit proposals                    # the open ones, waiting for review
      expgit proposals --state all --json
    """
    strays: list[Stray] = []
    items = list_proposals(open_repo(ctx), _states(state), strays=strays)
    skipped = skipped_strays(strays)

    def human() -> None:
        if not items:
            click.echo(f"no {state} proposals")
        for p in items:
            click.echo(f"{p.id}  {p.state:<8} {minute(p.time)}  {len(p.gradient_commits)} "
                       f"gradient(s)  {p.subject}")

    emit(as_json, {"proposals": [proposal_view(p) for p in items], **skipped}, human)


def inline_diffs(text: str, changes: Sequence[FileChange]) -> tuple[str, list[FileChange]]:
    """``text`` (a proposal's description) with the fenced diff block of each change
    replaced by that change's coloured diff, and the changes it holds no block of (a
    gradient, or a description from a template of the user's): each diff shows once."""
    rest: list[FileChange] = []
    for change in changes:
        block = re.compile(r"^(`{3,}|~{3,})diff\n" + re.escape(hunks(change.diff))
                           + r"\1[ \t]*$", re.MULTILINE)
        coloured = colour_diff(change.diff).rstrip("\n").replace("\\", "\\\\")
        text, found = block.subn(coloured, text, count=1)
        if not found:
            rest.append(change)
    return text, rest


@click.command("review")
@click.argument("item_id", metavar="ID", shell_complete=open_ids("proposal", "gradient"))
@json_option
@click.pass_context
def review_cmd(ctx: click.Context, item_id: str, as_json: bool) -> None:
    """Show a proposal or gradient: its description and a coloured diff per experience.

    An update that removes lines of an experience's body says how many ("removes 19 of
    22 lines of its body"), marked when it is half or more.

    The colour is for a terminal only, and never when NO_COLOR is set.

    \b
    Example:
      expgit review 3f2a9c1b7d4e          # a proposal, or a gradient's id
      expgit review 3f2a9c1b7d4e --json   # its description, diffs and note
    """
    repo = open_repo(ctx)
    item = find_any(repo, item_id)
    note = read_note(repo.git, item.commit)
    if isinstance(item, Proposal):
        data = proposal_view(item) | {"description": item.description,
                                      "diffs": {c.name: c.diff for c in item.changes}}
        changes, head = item.changes, f"proposal {item.id} ({item.state}): {item.subject}"
        text = item.description
    else:
        data = gradient_view(item) | {"diffs": {item.target: item.change.diff}}
        changes = [item.change]
        head = f"gradient {item.id} ({item.state}): {item.operation} {item.target}"
        text = (f"{item.rationale}\n\nconfidence {item.confidence:.2f}, base version "
                f"{item.base_version}, evidence: {', '.join(item.evidence) or '-'}")

    def human() -> None:
        shown, rest = inline_diffs(text, changes)
        click.echo(click.style(head, bold=True))
        click.echo(f"commit {item.commit}  by {item.author}  {minute(item.time)}")
        for change in changes:  # a rewrite that drops most of a rule shows at a glance
            if change.old_path is not None:  # a layout migration moves each file
                click.echo(f"rename {change.old_path} -> {change.path}")
            loss = change.body_loss
            if loss is not None and loss.removed:
                warn = loss.collapses
                click.echo(click.style(f"{change.name}: {loss}"
                                       + (" (half or more)" if warn else ""),
                                       fg="red" if warn else None, bold=warn))
        click.echo()
        click.echo(shown.rstrip() + "\n")
        if note:
            click.echo(click.style("Note: ", bold=True) + note)
        for change in rest:
            click.echo(colour_diff(change.diff))

    emit(as_json, data | {"note": note}, human)


@click.command("reject")
@click.argument("item_id", metavar="ID", shell_complete=open_ids("proposal", "gradient"))
@click.option("--reason", required=True, help="Why; kept in the audit trail as a git note.")
@json_option
@click.pass_context
def reject_cmd(ctx: click.Context, item_id: str, reason: str, as_json: bool) -> None:
    """Reject a proposal (and its gradients) or a single gradient.

    The branch is removed; the commit stays reachable under refs/expgit/rejected/ and the
    reason is kept as a note in refs/notes/expgit.

    \b
    Example:
      expgit reject 3f2a9c1b7d4e --reason 'too broad: it covers every fare class'
    """
    result = reject(open_repo(ctx), item_id, reason)
    emit(as_json, dataclasses.asdict(result), lambda: click.echo(
        f"Rejected {result.kind} {result.id} ({short(result.commit)})"
        + (f" and gradients {', '.join(result.gradients)}" if result.gradients else "")))
