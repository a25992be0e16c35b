"""``expgit context``: the experiences an agent should read for a request."""

from __future__ import annotations

import click

from expgit.cli._common import emit, json_option, open_repo
from expgit.retrieval.context import context_for


@click.command("context")
@click.argument("query")
@click.option("--at", "rev", metavar="REV", help="Read the experiences at this revision "
              "(default: main).")
@click.option("--top-k", "top_k", type=int, default=None,
              help="At most N experiences besides the always-on ones (default: [context] "
                   "top_k, none).")
@click.option("--token-budget", "token_budget", type=int, default=None,
              help="At most N estimated tokens in all (default: [context] token_budget).")
@json_option
@click.pass_context
def context_cmd(ctx: click.Context, query: str, rev: str | None, top_k: int | None,
                token_budget: int | None, as_json: bool) -> None:
    """Print the experiences an agent should read for QUERY, as a system prompt section.

    The always-on experiences, then the most relevant ones (BM25) that fit in the token
    budget, best first; why each one is there goes to stderr (and into --json).

    \b
    Example:
      expgit context "Can I cancel my basic economy ticket?" --top-k 3
      expgit context "refund to a gift card" --json
    """
    selection = context_for(open_repo(ctx), query, at=rev, token_budget=token_budget,
                            top_k=top_k)

    def human() -> None:
        click.echo(selection.markdown(), nl=False)
        for item in selection.items:
            click.echo(f"{item.name}: {item.reason}, about {item.tokens} tokens", err=True)
        click.echo(f"{len(selection.items)} of {selection.candidates} experiences, about "
                   f"{selection.tokens} of {selection.token_budget} tokens", err=True)

    emit(as_json, selection.as_json(), human)
