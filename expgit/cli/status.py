"""``expgit status``: main, open proposals and gradients, the lock, sessions, the last run."""

from __future__ import annotations

from typing import Any

import click

from expgit.cli._common import emit, json_option, minute, open_repo, short, skipped_strays
from expgit.cli._views import gradient_view, proposal_view, usage_view
from expgit.cli.doctor import diagnosis_view
from expgit.sessions.status.skill_usage import SkillsUsage
from expgit.status import MeasuredEffect, RepositoryStatus, repository_status
from expgit.store.doctor import describe_path
from expgit.store.lock import describe
from expgit.store.repository import ExperienceRepository

SHOWN = 5  # items per list on the screen; --json has them all


def _effect(effect: MeasuredEffect | None) -> str:
    if effect is None:
        return "not measured"
    parts = [f"baseline {effect.baseline} -> candidate {effect.candidate}"
             if effect.baseline and effect.candidate else "measured",
             *([f"delta {effect.delta:+.2f}pp"] if effect.delta is not None else []),
             *([f"gate {effect.gate}"] if effect.gate else [])]
    return ", ".join(parts)


def _more(total: int) -> list[str]:
    return [f"  ... and {total - SHOWN} more (--json lists them)"] if total > SHOWN else []


def _lock_lines(repo: ExperienceRepository, s: RepositoryStatus) -> list[str]:
    d = s.lock
    if d.lock == "held" and d.holder is not None:
        lines = [f"lock: held by {describe(d.holder)} (a live writer)"]
    elif d.lock == "stale" and d.holder is not None:
        lines = [f"lock: stale, left by {describe(d.holder)}: run `expgit doctor --fix`"]
    else:
        lines = ["lock: free"]
    lines += [f"  ref lock held by another process: {describe_path(repo, p)}"
              for p in d.foreign_locks]
    if d.unsettled:
        lines.append(f"  {len(d.unsettled)} refs to settle: run `expgit doctor --fix`")
    return lines


def status_lines(repo: ExperienceRepository, s: RepositoryStatus) -> list[str]:
    """One screen: a line per part, the first few items of each list."""
    lines = [f"{s.branch}: {short(s.commit)}"]
    u = s.last_update
    if u is not None:
        lines.append(f"  last update: {short(u.commit)} {u.kind} {minute(u.time)} UTC "
                     f"by {u.author.split(' <')[0]}: {u.subject}")
    lines.append(f"open proposals: {len(s.proposals)}")
    lines += [f"  {p.id}  {len(p.gradient_commits)} gradient(s), {_effect(effect)}: "
              f"{p.subject}" for p, effect in s.proposals[:SHOWN]]
    lines += _more(len(s.proposals))
    lines.append(f"open gradients in no proposal: {len(s.gradients)}"
                 + (" (`expgit merge --all` makes one)" if s.gradients else ""))
    lines += [f"  {g.id}  {g.operation} {g.target}, confidence {g.confidence:.2f}"
              for g in s.gradients[:SHOWN]]
    lines += _more(len(s.gradients))
    lines += _lock_lines(repo, s)
    lines.append(f"sessions: {len(s.pending_sessions)} pending of {s.sessions}"
                 + (" (`expgit sessions run` segments them)" if s.pending_sessions else ""))
    lines += _skill_lines(s.skills) if s.sessions else []  # no session: nothing to say
    run = s.last_run
    lines.append("last run: none measured a proposal" if run is None else
                 f"last run: proposal {run.proposal} ({run.state}) {minute(run.time)} UTC: "
                 f"{_effect(run.effect)}" + (f"; {run.effect.calls} LLM calls, cost "
                                             f"{run.effect.cost}"
                                             if run.effect.calls is not None else ""))
    return lines


def _skill_lines(skills: SkillsUsage | None) -> list[str]:
    """The skills part: the most loaded ones, and the stale ones (or why none is named)."""
    if skills is None or not skills.usage:
        return []
    used = sorted(((name, u) for name, u in skills.usage.items() if u.loads),
                  key=lambda item: (-item[1].loads_30d, item[0]))
    lines = [f"skills: {len(used)} of {len(skills.usage)} loaded in the ingested sessions"
             + (f"; {skills.unknown_loads} load(s) of names not on main"
                if skills.unknown_loads else "")]
    lines += [f"  {name}: {u.loads_30d} load(s) in {skills.window_days} days, last "
              + (f"{minute(u.last_load)} UTC" if u.last_load else "unknown")
              for name, u in used[:SHOWN]]
    lines += _more(len(used))
    if not skills.enough_history:
        lines.append(f"  stale: not enough history yet (the sessions span "
                     f"{skills.span_days or 0} of {skills.stale_days} days)")
    elif skills.stale:
        lines.append(f"  stale (no load in {skills.stale_days} days): "
                     + ", ".join(skills.stale[:20]) + (" ..." if len(skills.stale) > 20 else ""))
    else:
        lines.append(f"  stale: none (every active skill loaded in {skills.stale_days} days)")
    return lines


def _skills_view(skills: SkillsUsage | None) -> dict[str, Any] | None:
    """The skills block of ``--json``: times as whole seconds since the epoch."""
    if skills is None:
        return None
    return skills.model_dump(mode="json", exclude={"usage"}) | {
        "usage": {name: usage_view(u) for name, u in skills.usage.items()}}


def status_view(repo: ExperienceRepository, s: RepositoryStatus) -> dict[str, Any]:
    return {
        "branch": s.branch, "commit": s.commit,
        "last_update": s.last_update.model_dump() if s.last_update else None,
        "proposals": [proposal_view(p) | {"effect": e.model_dump() if e else None}
                      for p, e in s.proposals],
        "gradients": [gradient_view(g) for g in s.gradients],
        "lock": diagnosis_view(repo, s.lock),
        "sessions": {"branch": s.sessions_branch, "sessions": s.sessions,
                     "pending": [line.session for line in s.pending_sessions]},
        "last_run": s.last_run.model_dump() if s.last_run else None,
        "skills": _skills_view(s.skills),
    }


@click.command("status")
@json_option
@click.pass_context
def status_cmd(ctx: click.Context, as_json: bool) -> None:
    """Show main's tip and last update, open proposals and gradients, the lock, sessions.

    The open proposals come with their measured effect when training measured them;
    the gradients are those no open proposal holds; the lock is diagnosed as `expgit
    doctor` does; the last run is the newest measured effect training recorded in a
    proposal's description. Reads only; exit 0 whatever it finds.

    \b
    Example:
      expgit status
      expgit -C server.git status --json
    """
    repo = open_repo(ctx)
    result = repository_status(repo)
    skipped = skipped_strays(result.lock.strays)
    emit(as_json, status_view(repo, result) | skipped,
         lambda: click.echo("\n".join(status_lines(repo, result))))
