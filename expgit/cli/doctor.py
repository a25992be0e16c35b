"""``expgit doctor``: what a crash or a forge merge left behind; ``--fix`` recovers it."""

from __future__ import annotations

import click

from expgit.cli._common import emit, json_option, open_repo
from expgit.errors import EXIT_CONFLICT, EXIT_LOCKED
from expgit.store.doctor import Diagnosis, describe_path, diagnose, fix
from expgit.store.lock import describe
from expgit.store.repository import ExperienceRepository


def diagnosis_view(repo: ExperienceRepository, d: Diagnosis) -> dict[str, object]:
    """The diagnosis as ``--json`` prints it (``doctor``, and ``status``'s lock)."""
    recovered = d.recovered
    holder, stamp = d.holder, (d.holder or {}).get("time")
    if holder is not None and isinstance(stamp, float):  # --json times: whole seconds
        holder = holder | {"time": int(stamp)}
    return {
        "healthy": d.healthy, "lock": d.lock, "holder": holder,
        "dead_writer_locks": [describe_path(repo, p) for p in d.dead_writer_locks],
        "unfinished": d.unfinished, "behind": d.behind,
        "foreign_locks": [describe_path(repo, p) for p in d.foreign_locks],
        "unsettled": d.unsettled, "settled": d.settled,
        "recovered": None if recovered is None else recovered.summary(),
        "maintenance": None if d.maintenance is None else {
            "due": d.maintenance.due, "loose_objects": d.maintenance.loose,
            "gc_auto": d.maintenance.threshold, "last_failure": d.maintenance.failure},
        "maintained": d.maintained, "maintenance_warning": d.maintenance_warning,
        "strays": [s.as_dict() for s in d.strays],
    }


def _print(repo: ExperienceRepository, d: Diagnosis, fixed: bool) -> None:
    if d.recovered is not None and d.recovered.did_something:
        click.echo(f"recovered: {d.recovered.summary()}")
    if d.settled:
        click.echo(f"settled {len(d.settled)} refs where history puts them")
    if d.lock == "held" and d.holder is not None:
        click.echo(f"lock: held by {describe(d.holder)} (a live writer: wait for it)")
    elif d.lock == "stale" and d.holder is not None:
        click.echo(f"lock: stale, left by {describe(d.holder)}")
        for path in d.dead_writer_locks:
            click.echo(f"  its ref lock file: {describe_path(repo, path)}")
        if d.unfinished:
            click.echo(f"  its update did not reach: {', '.join(d.unfinished)}")
        for branch in d.behind:
            click.echo(f"  the working tree has not followed {branch}")
    for path in d.foreign_locks:
        click.echo(f"ref lock held by another process (a running git?): "
                   f"{describe_path(repo, path)}")
    if d.unsettled:
        click.echo(f"{len(d.unsettled)} refs are kept where history no longer puts them "
                   f"(a proposal merged by a forge, or a crash): {', '.join(d.unsettled[:5])}"
                   + (" ..." if len(d.unsettled) > 5 else ""))
    for stray in d.strays:
        click.echo(f"stray: {stray.name} is not expgit's ({stray.reason}); every listing "
                   f"skips it (look at it, then `git update-ref -d {stray.ref}`)")
    if d.maintained:
        click.echo("ran git's maintenance (packed loose objects, wrote the commit-graph)")
    if d.maintenance_warning:
        click.echo(f"expgit: warning: {d.maintenance_warning}", err=True)
    m = d.maintenance
    if m is not None and m.due:
        click.echo(f"unmaintained: about {m.loose} loose objects, past gc.auto={m.threshold}"
                   " (git's maintenance has not run)")
    if m is not None and m.failure:
        click.echo(f"the last git maintenance failed: {m.failure}")
    if d.healthy:
        click.echo("healthy: nothing to recover")
    elif d.needs_fix and not fixed:
        click.echo("run `expgit doctor --fix` to recover")


@click.command("doctor")
@click.option("--fix", "do_fix", is_flag=True,
              help="Recover: clear a crashed writer's lock files, finish its update, bring "
              "a clean working tree up to main, keep refs where history puts them, and run "
              "git's maintenance when loose objects are past gc.auto.")
@json_option
@click.pass_context
def doctor_cmd(ctx: click.Context, do_fix: bool, as_json: bool) -> None:
    """Show what a crashed writer or a forge merge left behind, without changing anything.

    Exit 0 when healthy, 3 when there is something `--fix` recovers, 4 when a running
    process holds a lock (a live expgit writer, or a git holding a ref lock file).

    \b
    Example:
      expgit doctor
      expgit doctor --fix --json
    """
    repo = open_repo(ctx)
    result = fix(repo) if do_fix else diagnose(repo)
    emit(as_json, diagnosis_view(repo, result), lambda: _print(repo, result, do_fix))
    if result.held_by_others:
        ctx.exit(EXIT_LOCKED)
    if result.needs_fix:
        ctx.exit(EXIT_CONFLICT)
