"""What a train/eval run prints (docs/design.md, "What a run reports") and writes with ``--report``.

Phase lines (training phases add ``commits=1 errors=0``)::

    [baseline_eval] epoch=-1 cases=10 accuracy=20.00% passed=2/10 avg_reward=0.200000
    [train_epoch] epoch=0 cases=50 accuracy=18.00% passed=9/50 avg_reward=0.180000 ...
    [final_eval] epoch=1 cases=10 accuracy=30.00% passed=3/10 avg_reward=0.300000

A final eval of a tree the run already measured ends ``reused=baseline_eval`` (propose
mode: ``main`` did not move) or ``reused=candidate_eval`` (an applied proposal's): those
rollouts, no call. Then the accuracy summary (with a
baseline and a final eval), then the LLM cost table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field, computed_field

from expgit.errors import InvalidInputError, ToolServerError
from expgit.llm.budget import SPENT, RunEstimate, money
from expgit.llm.port import NOT_CALLED, Failure, StageUsage, UsageMeter
from expgit.store.derived.predictions import PredictionRecords, TrackRecord
from expgit.store.format.provenance import Provenance
from expgit.train.measurement.candidate import CandidateReport, SkillLift, lift_line, summary_line
from expgit.train.measurement.phase_metrics import PhaseMetrics
from expgit.train.remote_push import RemoteReport

STAGE_ORDER = ("rollout", "judge", "reflect", "analyze", "estimate", "merge", "compress")
TRAINING_PHASES = ("train_epoch", "train_rollouts")
BUDGET_SPENT = NOT_CALLED + SPENT  # the error of a call the budget refused
TOOL_SERVER = f"{ToolServerError.__name__}: "  # a rollout whose tool server broke


class UsageReport(BaseModel):
    """The calls, tokens and cost by stage; a cost is null (unknown) when a call had no
    price (``[llm.prices]``), ``currency`` then null too."""

    by_stage: dict[str, StageUsage] = Field(default_factory=dict)
    total: StageUsage = Field(default_factory=StageUsage)
    currency: str | None = None

    @classmethod
    def of(cls, meter: UsageMeter, currency: str | None = None) -> UsageReport:
        stages = meter.by_stage()
        ordered = {s: stages[s] for s in STAGE_ORDER if s in stages}
        ordered.update({s: u for s, u in stages.items() if s not in ordered})
        total = meter.total()
        return cls(by_stage=ordered, total=total,
                   currency=currency if total.cost is not None else None)


class RunReport(BaseModel):
    """The whole run, as ``--report FILE`` writes it."""

    command: str
    repository: str
    llm: str
    mode: str | None = None
    main_before: str | None = None
    main_after: str | None = None
    phases: list[PhaseMetrics] = Field(default_factory=list)
    proposals: list[str] = Field(default_factory=list)
    applied_commits: list[str] = Field(default_factory=list)
    pr_body: str | None = None
    notes: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)  # the run did not work: exit 1
    remote: RemoteReport | None = None  # --remote: what was pushed there
    candidates: list[CandidateReport] = Field(default_factory=list)  # candidate eval
    # the agent and trainer models, the endpoint's host, the embedded model's file hash
    provenance: Provenance | None = None
    warnings: list[str] = Field(default_factory=list)  # printed on stderr too
    usage: UsageReport = Field(default_factory=UsageReport)
    # what was redacted from cases, rollouts and model output, by kind; ``cut_messages``:
    # texts cut to [limits] max_message_chars; ``refused_secret`` / ``refused_copy``:
    # edits refused for a secret or for copying their input; ``degenerate``: edits, merge
    # items, trajectories and trajectory lines dropped as junk; ``cosmetic``: edits and
    # merge items that changed only the form of a file; ``collapse``: those that removed
    # half or more of an experience's body; ``injection``: those that held a prompt
    # injection payload; ``skill_name``: those naming a skill as the Agent Skills rules
    # do not allow (expgit/train/guards/lesson.py)
    redactions: dict[str, int] = Field(default_factory=dict)
    # the LLM calls that failed, by stage and cause; and why the run stopped calling
    # early (a dead endpoint, the per-run deadline, the budget), None if it did not
    failures: list[Failure] = Field(default_factory=list)
    stopped: str | None = None
    estimate: RunEstimate | None = None  # what the run would take, said before it ran
    seconds: float = 0.0
    # eval --skill: the skill's lift on its own evals, and where benchmark.json went
    skill_lift: SkillLift | None = None
    benchmark: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def hit_rates(self) -> dict[str, dict[str, dict[str, object]]]:
        """The checked predictions of this run's candidates, per experience and per
        proposing model (``expgit list --stats`` has them over every run)."""
        records = run_records(self.candidates)
        return {"by_experience": {k: v.as_dict() for k, v in records.by_experience.items()},
                "by_model": {k: v.as_dict() for k, v in records.by_model.items()}}

    def errors(self) -> list[str]:
        """What went wrong in a run that still finished: one line per kind of failed
        call, then the phases' errors and failed rollouts (the run exits 7 if any)."""
        lines = [f"{f.count} {f.stage} call{'s' if f.count != 1 else ''}: {f.cause}"
                 for f in self.failures]
        errors = sum(len(m.errors) for m in self.phases)
        failed = sum(1 for m in self.phases if m.phase != "train_rollouts"
                     and m.reused is None for r in m.rollouts if r.error)
        if not lines and errors:
            lines.append(f"{errors} training error{'s' if errors != 1 else ''} "
                         "(see --report)")
        if not lines and failed:
            lines.append(f"{failed} rollout{'s' if failed != 1 else ''} failed "
                         "(see --report)")
        return lines

    def phase(self, name: str) -> PhaseMetrics | None:
        return next((p for p in self.phases if p.phase == name), None)

    def check(self) -> None:
        """Record a phase whose every rollout failed (an unreachable model, typically).
        Recorded rollouts (``train_rollouts``) are data: failed ones are fine there; and
        rollouts not made because the budget was spent are no fault of the model."""
        for m in self.phases:
            if m.phase == "train_rollouts" or m.reused is not None:
                continue
            failed = [r for r in m.rollouts if r.error]
            # not the model's fault either: a broken tool server (its cause is counted
            # as a failed rollout, exit 7)
            if all(BUDGET_SPENT in (r.error or "") or TOOL_SERVER in (r.error or "")
                   for r in failed):
                continue
            if m.rollouts and len(failed) == len(m.rollouts):
                self.problems.append(
                    f"{m.phase} epoch={m.epoch}: all {len(failed)} rollouts failed; first: "
                    f"case {failed[0].case}: {failed[0].error}")


def run_records(candidates: list[CandidateReport]) -> PredictionRecords:
    records = PredictionRecords()
    for candidate in candidates:
        for check in candidate.predictions:
            records.add(check.experience, check.model, check.verdict)
    return records


def prediction_lines(candidates: list[CandidateReport]) -> list[str]:
    """``predictions: 1 hit, 1 missed, 0 unchecked; hits by experience: a 1/1, b 0/1;
    by model: m 1/2``; nothing when no edit predicted anything."""
    checks = [c for report in candidates for c in report.predictions]
    if not checks:
        return []
    count = {v: sum(c.verdict == v for c in checks) for v in ("hit", "miss", "unchecked")}
    records = run_records(candidates)

    def rates(table: dict[str, TrackRecord]) -> str:
        return ", ".join(f"{k} {r.hits}/{r.checked}" for k, r in sorted(table.items())
                         if r.checked) or "none checked"
    return [f"predictions: {count['hit']} hit, {count['miss']} missed, "
            f"{count['unchecked']} unchecked; hits by experience: "
            f"{rates(records.by_experience)}; by model: {rates(records.by_model)}"]


def accuracy(metrics: PhaseMetrics) -> str:
    return f"{metrics.accuracy * 100:.2f}%"


def phase_line(metrics: PhaseMetrics) -> str:
    line = (f"[{metrics.phase}] epoch={metrics.epoch} cases={metrics.cases} "
            f"accuracy={accuracy(metrics)} passed={metrics.passed}/{metrics.cases} "
            f"avg_reward={metrics.average_reward:.6f}")
    if metrics.phase in TRAINING_PHASES:
        line += f" commits={metrics.commits} errors={len(metrics.errors)}"
    s = metrics.summary
    g = metrics.groups
    if g is not None:  # a training phase in groups: pass^k of its groups
        line += (f" group_size={g.size} groups={g.groups} reflected={g.reflected} "
                 f"skipped={g.skipped} run_errors={g.errors}")
        if s is not None:
            line += f" pass^1={s.pass_k['1']:.3f} pass^{g.size}={s.pass_k[str(g.size)]:.3f}"
    elif s is not None and s.trials > 1:
        line += (f" trials={s.trials} pass^1={s.pass_k['1']:.3f} "
                 f"pass^{s.trials}={s.pass_k[str(s.trials)]:.3f} "
                 f"ci={s.ci[0] * 100:.1f}-{s.ci[1] * 100:.1f}%")
    if metrics.reused is not None:
        line += f" reused={metrics.reused}"
    return line


def delta_lines(baseline: PhaseMetrics, final: PhaseMetrics) -> list[str]:
    delta = (final.accuracy - baseline.accuracy) * 100
    return [f"baseline accuracy: {accuracy(baseline)} ({baseline.passed}/{baseline.cases})",
            f"final accuracy: {accuracy(final)} ({final.passed}/{final.cases})",
            f"accuracy delta: {delta:+.2f}pp"]


def held_out_comparison(report: RunReport) -> str | None:
    """What the final eval was compared with, in words (the text summary and the HTML
    report say the same); None without a baseline and a final eval."""
    final = report.phase("final_eval")
    if report.phase("baseline_eval") is None or final is None:
        return None
    before, after = (report.main_before or "?")[:12], (report.main_after or "?")[:12]
    reused = (f"; the final eval is the {final.reused} of the same tree, not run again"
              if final.reused else "")
    if before != after:
        return f"the final eval of main at {after} against the baseline eval at {before}" \
            + reused
    why = " (propose mode)" if report.mode == "propose" else ""
    effect = ("; a proposal's own effect is its candidate eval" if report.candidates
              else "")
    return (f"the final eval against the baseline eval, both of main at {before}, which "
            f"this run did not change{why}: a verdict that differs between them is the "
            f"model's variance, not a lesson{effect}{reused}")


def cost_table(usage: UsageReport) -> list[str]:
    """The calls, tokens and cost by stage; the cost in ``usage.currency``, or
    ``unknown`` for a stage with a call that had no price."""
    cost = f"cost ({usage.currency})" if usage.currency else "cost"
    head = ("stage", "calls", "prompt tokens", "completion tokens", cost)
    rows = [(stage, str(u.calls), str(u.prompt_tokens), str(u.completion_tokens),
             money(u.cost, None)) for stage, u in usage.by_stage.items()]
    t = usage.total
    rows.append(("total", str(t.calls), str(t.prompt_tokens), str(t.completion_tokens),
                 money(t.cost, None)))
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def fmt(row: tuple[str, ...]) -> str:
        return "  ".join([row[0].ljust(widths[0])]
                         + [cell.rjust(w) for cell, w in zip(row[1:], widths[1:],
                                                              strict=True)])

    return ["LLM usage:", fmt(head), *map(fmt, rows)]


SHOWN_REJECTIONS = 5


def rejected_lines(phases: list[PhaseMetrics]) -> list[str]:
    """The estimator's refused edits (over budget, unchanged, unknown file...), so a run
    that produced no gradient says why; the first few, then a count."""
    rejected = [r for p in phases for r in p.rejected_edits]
    if not rejected:
        return []
    more = len(rejected) - SHOWN_REJECTIONS
    return (["", f"rejected edits: {len(rejected)}"]
            + [f"  {r}" for r in rejected[:SHOWN_REJECTIONS]]
            + ([f"  ... and {more} more (see --report)"] if more > 0 else []))


def skill_lines(phases: list[PhaseMetrics]) -> list[str]:
    """Listing mode: each phase's skill reach, and the training edits that changed only
    a skill's description."""
    lines: list[str] = []
    for p in phases:
        if p.skill_reach is not None and p.reused is None:
            lines += ["", f"skill reach [{p.phase}]:"] + (
                [f"  {r.line()}" for r in p.skill_reach] or ["  (no skill listed)"])
    edits = sum(p.description_edits for p in phases)
    if edits:
        lines += ["", f"edits that change only a skill's description: {edits}"]
    return lines


def remote_lines(remote: RemoteReport | None) -> list[str]:
    """``pushed to origin: 3 gradients, 1 proposals, 1 trajectories (1 replayed)``."""
    if remote is None:
        return []
    counts = ", ".join(f"{n} {kind}" for kind, n in remote.pushed.items() if n) or "nothing new"
    replayed = f" ({remote.replayed} replayed on a tip another trainer pushed)" \
        if remote.replayed else ""
    return ([f"pushed to {remote.remote}: {counts}{replayed}"]
            + [f"kept {remote.remote}'s version of {path}" for path in remote.kept_remote]
            + [f"not pushed to {remote.remote}: {error}" for error in remote.errors])


def skill_lift_lines(report: RunReport) -> list[str]:
    """eval --skill: the lift, the calls it took (by the run's usage meter) and where
    benchmark.json went."""
    assert report.skill_lift is not None
    stages = report.usage.by_stage
    rollouts = stages["rollout"].calls if "rollout" in stages else 0
    judges = stages["judge"].calls if "judge" in stages else 0
    lift = report.skill_lift
    return [lift_line(lift),
            f"calls: {report.usage.total.calls} ({rollouts} rollouts: {lift.candidate.cases}"
            f" cases x {lift.candidate.trials} runs x 2; {judges} judge)",
            f"benchmark: {report.benchmark}"]


def render_text(report: RunReport, verdict: Sequence[str] = ()) -> str:
    """The human output of a run: phase lines, accuracy delta, proposals, the
    ``verdict`` lines (what the run learned: :mod:`expgit.train.reports.verdict`), cost table."""
    lines = [phase_line(p) for p in report.phases]
    baseline, final = report.phase("baseline_eval"), report.phase("final_eval")
    if baseline is not None and final is not None:
        lines += ["", *delta_lines(baseline, final), f"compared: {held_out_comparison(report)}"]
    lines += rejected_lines(report.phases)
    lines += skill_lines(report.phases)
    if report.candidates:
        lines += ["", *map(summary_line, report.candidates),
                  *(f"  {lift_line(lift)}" for c in report.candidates
                    for lift in c.skill_lifts),
                  *prediction_lines(report.candidates)]
    if report.skill_lift is not None:
        lines += ["", *skill_lift_lines(report)]
    if report.command != "eval":
        lines.append("")
        if report.proposals:
            lines += [f"proposal: {pid} (branch expgit/proposals/{pid})"
                      for pid in report.proposals]
        else:
            lines.append("proposal: none (no gradient was planned)")
        lines += [f"applied: {sha[:12]}" for sha in report.applied_commits]
        if report.pr_body:
            lines.append(f"PR body: {report.pr_body}")
        if report.provenance is not None:
            lines.append(f"models: {report.provenance.line()}")
        lines += remote_lines(report.remote)
    if report.failures:
        lines += ["", "failed LLM calls:", *(f"  {line}" for line in report.errors())]
    if report.stopped:
        lines.append(f"stopped early: {report.stopped}")
    if verdict:
        lines += ["", *verdict]
    return "\n".join([*lines, "", *cost_table(report.usage)]) + "\n"


def write_report(report: RunReport, path: Path) -> None:
    try:
        path.write_text(report.model_dump_json(indent=2) + "\n")
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot write the report: {exc.strerror}") from None
