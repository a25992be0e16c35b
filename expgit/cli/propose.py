from __future__ import annotations

import math
from typing import BinaryIO

import click
from pydantic import ValidationError

from expgit.cli._common import emit, json_option, open_repo
from expgit.cli._views import gradient_view
from expgit.errors import InvalidInputError
from expgit.store.format.experience import decode_experience
from expgit.store.workflow.gradients import GradientRequest, propose


def _not_nan(value: float) -> float:
    # FloatRange lets NaN through: every comparison with NaN is false
    if math.isnan(value):
        raise click.BadParameter(f"{value} is not in the range 0<=x<=1.")
    return value


@click.command("propose")
@click.argument("name")
@click.option("--content-file", type=click.File("rb"),
              help="The whole new experience file (front matter and body); - for stdin.")
@click.option("--delete", is_flag=True, help="Propose deleting the experience.")
@click.option("--rationale", required=True, help="Why this edit helps the agent.")
@click.option("--evidence", multiple=True, help="Where the lesson comes from (a trajectory, "
              "a session, a URL); repeatable.")
@click.option("--confidence", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              callback=lambda _ctx, _param, value: _not_nan(value),
              help="How sure the proposer is, from 0 to 1.")
@json_option
@click.pass_context
def propose_cmd(ctx: click.Context, name: str, content_file: BinaryIO | None, delete: bool,
                rationale: str, evidence: tuple[str, ...], confidence: float,
                as_json: bool) -> None:
    """Propose one edit of experience NAME as a gradient commit on its own branch.

    The commit's parent is the current main; it changes exactly experiences/NAME.md and
    records the rationale, evidence and confidence as git trailers. Prints the gradient id.

    \b
    Example:
      expgit propose refund-method-rules --content-file new.md --rationale 'why'
      expgit propose old-rule --delete --rationale 'superseded' --evidence traj-42
    """
    if delete == (content_file is not None):
        raise InvalidInputError("give --content-file FILE for an edit, or --delete")
    content = None
    if content_file is not None:
        content = decode_experience(content_file.read(), content_file.name)
    try:
        request = GradientRequest(name=name, content=content, delete=delete,
                                  rationale=rationale, evidence=list(evidence),
                                  confidence=confidence)
    except ValidationError as exc:
        raise InvalidInputError("; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from None
    gradient = propose(open_repo(ctx), request)
    emit(as_json, gradient_view(gradient), lambda: click.echo(gradient.id))
