"""``expgit eval --skill NAME --triggers``: a skill's trigger evals run by the listing
agent (:mod:`expgit.train.trigger_eval`), wired from the repository's settings."""

from __future__ import annotations

from expgit.errors import InvalidInputError, UsageError
from expgit.retrieval.skill_listing import ListingMode
from expgit.runs.build import RunOptions, open_llm_for
from expgit.store.repository import ExperienceRepository
from expgit.train.reports.run_report import UsageReport
from expgit.train.trigger_eval import TriggerReport, load_triggers, run_triggers


async def run_trigger_eval(repo: ExperienceRepository, skill: str, options: RunOptions, *,
                           runs: int = 3, at: str | None = None) -> TriggerReport:
    """Each query of ``skill``'s ``evals/triggers.json`` at ``at`` (default: main) run
    ``runs`` times by the listing agent (whatever ``[agent] skills`` says: a trigger is
    a Skill call). The file and the skill are checked before any model starts."""
    if not repo.layout.skills:
        raise UsageError("trigger evals need the skills layout (layout = \"skills\")",
                         hint="expgit migrate --to skills")
    if runs < 1:
        raise UsageError(f"--runs must be at least 1, not {runs}")
    commit = repo.commit(at) if at is not None else repo.main_commit()
    path, queries = load_triggers(repo, commit, skill)
    snapshot = repo.snapshot(commit)
    entry = snapshot.get(skill)
    if entry is None or entry.experience.status != "active":
        raise InvalidInputError(f"{skill!r} is not an active skill at {commit[:12]}: a "
                                "trigger is a load of an active skill")
    settings = repo.settings
    mode = ListingMode(settings.agent.listing_budget_tokens,
                       settings.agent.listing_description_chars,
                       settings.context.token_budget)
    runtime = open_llm_for(repo, options)
    async with runtime:
        report = await run_triggers(runtime.structured, repo, snapshot, mode, skill, path,
                                    queries, runs=runs, concurrency=options.concurrency,
                                    max_steps=settings.train.tool_max_steps)
        report.usage = UsageReport.of(runtime.meter, settings.llm.currency)
    return report
