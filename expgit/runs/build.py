"""The three runs the CLI offers (``train``, ``eval``, ``train-rollouts``), each one call.

Cases come from a cases file (a Path) or from an environment service (RemoteCases,
``--env-url``): then the service runs the rollouts too, its ``/health`` is checked and
its cases fetched before any model is started, and ``eval`` starts no model at all.
Cases and rollouts files are read (and refused, exit 5) before any model is started.
With an MCP server (``[agent.mcp]``, ``--mcp-command`` / ``--mcp-url``) every case of a
file runs as a tool-calling conversation with its tools (docs/mcp-tools.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from expgit.core.domain import Case, Rollout
from expgit.errors import UsageError
from expgit.llm.budget import RunEstimate
from expgit.llm.port import UsageListener, UsageMeter
from expgit.llm.structured import StructuredLLM
from expgit.remote.environment import NoTrainer, RemoteCases
from expgit.runs import budget as run_budget
from expgit.runs import provenance as run_provenance
from expgit.runs.relabel import by_feedback
from expgit.runs.run_files import load_rollouts, write_pr_body
from expgit.runs.wiring import build_pipeline, mcp_tools
from expgit.store.format.provenance import Provenance
from expgit.store.format.settings import McpSettings
from expgit.store.refnames import ID_LEN
from expgit.store.repository import ExperienceRepository
from expgit.store.skill_evals_file import SkillEvals
from expgit.train.cases import ListCaseLoader, load_cases
from expgit.train.components.snapshotter import ContentHashPolicySnapshotter
from expgit.train.context import PipelineContext
from expgit.train.groups import check_group_size
from expgit.train.interfaces import RolloutExecutor
from expgit.train.measurement.candidate import Gate, SkillLift, gate_skill_lifts
from expgit.train.measurement.candidate import compare as compare_runs
from expgit.train.measurement.candidate_stage import CandidateStage
from expgit.train.measurement.phase_metrics import (
    BatchRecord,
    PhaseMetrics,
    PipelineEvaluationResult,
    add_training,
)
from expgit.train.measurement.skill_evals import (
    SkillCases,
    check_skill_evals,
    proposal_skill_lifts,
    skill_evals_between,
)
from expgit.train.pipeline import OfflinePolicyOptimizationPipeline, PipelineObserver
from expgit.train.remote_push import RemotePublisher
from expgit.train.reports.run_report import RunReport, UsageReport
from expgit.train.tools.environment import EnvironmentFactory
from expgit.train.tools.users import check_user_input

if TYPE_CHECKING:
    from expgit.llm.factory import LLMRuntime

Mode = Literal["propose", "apply"]


class RunObserver(PipelineObserver, UsageListener, Protocol):
    """A run's progress: the pipeline's events and each LLM call (stage, usage so far);
    before any of them, whether the model's calls have a price (``[llm.prices]``)."""

    def priced(self, known: bool) -> None: ...


ObserverFactory = Callable[[dict[str, int]], RunObserver]
# a cases file, a skill's evals (``--cases skill:NAME``), or a split of an environment
# service
CaseSource = Path | SkillCases | RemoteCases
NO_LLM = "none here: the environment service runs the rollouts"  # a remote eval's report


@dataclass(frozen=True)
class LLMOptions:
    """Command-line choices of the model; None: from expgit.toml and the environment."""

    choice: Literal["local", "openai"] | None = None
    model: str | None = None
    base_url: str | None = None
    user_model: str | None = None  # the simulated user's model; None: ``model``


@dataclass(frozen=True)
class RunOptions:
    llm: LLMOptions = field(default_factory=LLMOptions)
    concurrency: int = 4
    mode: Mode = "propose"
    pr_body: Path | None = None
    progress: ObserverFactory | None = None
    remote: str | None = None  # push to this remote (several trainers, one repository)
    evaluator: str = "recorded"  # train-rollouts: "feedback" relabels by feedback signals
    trials: int = 1  # runs of every eval case
    gate: Gate | None = None  # the regression gate; None: not checked
    candidate_eval: bool = True  # with eval cases: measure each proposal's snapshot
    max_calls: int | None = None  # the run's budget; None: [llm] max_calls / max_cost
    max_cost: float | None = None
    announce: run_budget.Announce | None = None  # told the estimate before the run
    group_size: int | None = None  # train: runs of each case; None: [train] group_size
    # the agent's tools from an MCP server (--mcp-command / --mcp-url); None: [agent.mcp]
    mcp: McpSettings | None = None


def _report(command: str, repo: ExperienceRepository, runtime: LLMRuntime | None,
            options: RunOptions, phases: list[PhaseMetrics], started: float,
            pipeline: OfflinePolicyOptimizationPipeline, provenance: Provenance,
            estimate: RunEstimate | None = None) -> RunReport:
    """``runtime`` None: no model was started here (a remote eval)."""
    report = RunReport(command=command, repository=str(repo.git.work_tree or repo.git.git_dir),
                       llm=runtime.description if runtime is not None else NO_LLM,
                       phases=phases, mode=None if command == "eval" else options.mode,
                       usage=UsageReport.of(runtime.meter, repo.settings.llm.currency)
                       if runtime is not None else UsageReport(), estimate=estimate,
                       redactions=pipeline.redactor.report(), provenance=provenance)
    report.proposals = [p for m in phases for p in m.proposals]
    report.applied_commits = [c for m in phases for c in m.applied_commits]
    if options.pr_body is not None and report.proposals:
        write_pr_body(repo, report.proposals, options.pr_body)
        report.pr_body = str(options.pr_body)
    report.seconds = time.monotonic() - started
    if runtime is not None:
        report.failures = runtime.meter.failures()
        guard = runtime.meter.guard
        report.stopped = guard.stopped if guard is not None else None
    report.check()
    return report


def open_llm_for(repo: ExperienceRepository, options: RunOptions) -> LLMRuntime:
    from expgit.llm.factory import open_llm  # the openai client loads only when needed

    settings = repo.settings.llm
    # a batch run stops its calls when it cannot go on (a long-running service does not)
    guard = run_budget.guard_for(settings, options.max_calls, options.max_cost)
    runtime = open_llm(settings, choice=options.llm.choice, model=options.llm.model,
                       base_url=options.llm.base_url, meter=UsageMeter(guard=guard),
                       preflight=True)
    run_budget.check_priced(guard.budget, runtime)
    return runtime


@contextlib.asynccontextmanager
async def _user_llm(repo: ExperienceRepository, options: RunOptions, runtime: LLMRuntime
                    ) -> AsyncIterator[StructuredLLM | None]:
    """``--user-model``: the simulated user's model on the same endpoint, its calls on
    the run's meter (and budget); None without it (the user is the agent's model)."""
    if options.llm.user_model is None:
        yield None
        return
    from expgit.llm.factory import open_llm

    user = open_llm(repo.settings.llm, choice=options.llm.choice,
                    model=options.llm.user_model, base_url=options.llm.base_url,
                    meter=runtime.meter)
    async with user:
        yield user.structured


def _open_planned(repo: ExperienceRepository, options: RunOptions,
                  plan: run_budget.RunPlan) -> tuple[LLMRuntime, RunEstimate]:
    """The run's runtime (to open) and estimate, told to ``announce`` before it runs."""
    runtime = open_llm_for(repo, options)
    return runtime, run_budget.announce(plan, runtime, options.announce)


def _publisher(repo: ExperienceRepository, options: RunOptions) -> RemotePublisher | None:
    """``--remote``: its publisher; an unknown remote is refused first (exit 2)."""
    return RemotePublisher(repo, options.remote) if options.remote is not None else None


async def _push_rest(report: RunReport, publisher: RemotePublisher | None) -> None:
    """The last round of pushes (every side branch, what earlier ones left behind)."""
    if publisher is not None:
        report.remote = await asyncio.to_thread(publisher.finish)


def _observer(options: RunOptions, totals: dict[str, int]) -> RunObserver | None:
    return options.progress(totals) if options.progress is not None else None


def _listen(runtime: LLMRuntime, observer: RunObserver | None) -> None:
    """Tell ``observer`` whether the calls are priced, then of each LLM call (its stage,
    the usage so far)."""
    if observer is not None:
        observer.priced(runtime.meter.price(runtime.resolved.model) is not None)
        runtime.meter.listener = observer


async def _cases(repo: ExperienceRepository, source: CaseSource, trials: int = 1
                 ) -> list[Case]:
    """The cases, each ``trials`` times in a row (repeated eval trials)."""
    cases = (load_cases(source) if isinstance(source, Path) else source.load(repo)
             if isinstance(source, SkillCases) else await source.load())
    return [case for case in cases for _ in range(trials)]


def _tools(repo: ExperienceRepository, options: RunOptions, *case_sets: list[Case] | None
           ) -> EnvironmentFactory | None:
    """The agent's MCP tools (the command line's server, else ``[agent.mcp]``), with
    every case checked to say who its user is (exit 5), before any model starts."""
    tools = mcp_tools(repo, options.mcp or repo.settings.agent.mcp)
    if tools is not None:
        for cases in case_sets:
            for i, case in enumerate(cases or []):
                check_user_input(case, f"case {i} ({case.name!r}), run with MCP tools")
    return tools


async def _remote_executor(repo: ExperienceRepository, source: CaseSource,
                           options: RunOptions) -> tuple[RolloutExecutor | None, str | None]:
    """The service's executor when the cases are remote (checked first: /health), and
    the agent model it runs (None: the rollouts run here)."""
    if not isinstance(source, RemoteCases):
        return None, None
    health = await source.service.check()
    return (source.service.executor(repo, max_in_flight=options.concurrency),
            run_provenance.service_agent(health))


async def run_train(repo: ExperienceRepository, cases: CaseSource, options: RunOptions, *,
                    eval_cases: CaseSource | None = None, epochs: int = 1,
                    batch_size: int | None = None) -> RunReport:
    """Baseline eval (with ``eval_cases``), ``epochs`` training epochs (each proposal
    measured on the eval cases, unless ``options.candidate_eval`` is off), final eval."""
    if options.gate is not None and (eval_cases is None or not options.candidate_eval):
        raise UsageError("the gate needs the held-out cases and the candidate eval",
                         hint="add --eval-cases FILE (and drop --no-candidate-eval)")
    if options.gate is not None and options.remote is not None:
        raise UsageError("the gate cannot be used with --remote yet",
                         hint="train without --remote, then `expgit apply PROPOSAL --gate "
                         "--eval-cases FILE --remote NAME`")
    # With --remote the proposal is pushed as soon as it is made, so its description
    # cannot take the figures afterwards: no candidate eval there (yet).
    measure = options.candidate_eval and options.remote is None
    group_size = check_group_size(options.group_size, repo.settings.train.group_size)
    publisher = _publisher(repo, options)
    executor, agent = await _remote_executor(repo, cases, options)
    train_set = await _cases(repo, cases)
    eval_set = (await _cases(repo, eval_cases, options.trials) if eval_cases is not None
                else None)
    if eval_set and measure:  # the changed skills' evals will be measured: read them now
        check_skill_evals(repo, repo.main_commit())
    tools = _tools(repo, options, train_set, eval_set) if executor is None else None
    started = time.monotonic()
    totals = {"train_epoch": len(train_set) * group_size,
              "baseline_eval": len(eval_set or []),
              "candidate_eval": len(eval_set or []), "final_eval": len(eval_set or [])}
    observer = _observer(options, totals)
    runtime, estimate = _open_planned(repo, options, run_budget.train_plan(
        repo, train_set, eval_set, epochs=epochs, batch_size=batch_size,
        measure=measure, rollouts_here=executor is None, group_size=group_size,
        apply=options.mode == "apply"))
    made_by = run_provenance.of_runtime(runtime, agent)
    async with runtime, _user_llm(repo, options, runtime) as user_llm:
        _listen(runtime, observer)
        stage = CandidateStage(repo, trials=options.trials, gate=options.gate,
                               apply=options.mode == "apply", usage=runtime.meter.total,
                               agent_model=made_by.agent_model
                               ) if eval_set and measure else None
        pipeline = build_pipeline(repo, runtime, concurrency=options.concurrency,
                                  observer=observer, executor=executor,
                                  publisher=publisher, candidates=stage,
                                  group_size=group_size, provenance=made_by, tools=tools,
                                  user_llm=user_llm)
        result = await pipeline.train(
            ListCaseLoader(train_set, batch_size or len(train_set)),
            PipelineContext(max_epochs=epochs, mode=options.mode),
            ListCaseLoader(eval_set, batch_size or len(eval_set)) if eval_set else None)
        report = _report("train", repo, runtime, options, result.phases, started, pipeline,
                         made_by, estimate)
    report.main_before, report.main_after = result.main_before, result.main_after
    report.candidates = result.candidates
    report.notes = result.notes
    if eval_set and options.candidate_eval and not measure:
        report.notes.append("--remote: the proposals were not measured on the eval cases "
                            "(no candidate eval); measure one with `expgit eval --compare "
                            "main PROPOSAL`")
    await _push_rest(report, publisher)
    return report


async def _skill_lifts(pipeline: OfflinePolicyOptimizationPipeline, base: str, commit: str,
                       found: list[tuple[str, SkillEvals]], trials: int) -> list[SkillLift]:
    """eval --compare A B: each skill B changes that has evals, A against B on them."""
    async def evaluate(commit: str, phase: str, epoch: int,
                       cases: Sequence[Case] | None = None) -> list[Rollout]:
        loader = ListCaseLoader(cases or [], len(cases or []) or 1)
        return (await pipeline.eval(loader, PipelineContext(epoch=epoch), at=commit,
                                    phase=phase)).rollouts

    return await proposal_skill_lifts(pipeline.repo, evaluate, base, commit, found, 0, trials)


async def run_eval(repo: ExperienceRepository, cases: CaseSource, options: RunOptions, *,
                   batch_size: int | None = None, at: str | None = None,
                   compare: tuple[str, str] | None = None) -> RunReport:
    """Run and score the cases against ``main``, or the revision ``at``; with ``compare``
    (A, B), against both, and B's effect as a candidate of A. Writes nothing. Remote
    cases: the service runs and scores them, and no model is started here."""
    revisions = list(compare) if compare is not None else [at]
    commits = [repo.commit(rev) if rev is not None else None for rev in revisions]
    executor, agent = await _remote_executor(repo, cases, options)
    eval_set = await _cases(repo, cases, options.trials)
    # B's changed skills with evals: read (a malformed file refused) before any model
    base, new = commits[0], commits[-1]
    skill_evals = (skill_evals_between(repo, base, new)
                   if compare is not None and executor is None and base and new else [])
    started = time.monotonic()
    loader = ListCaseLoader(eval_set, batch_size or len(eval_set))
    observer = _observer(options, {"eval": len(eval_set), "candidate_eval": len(eval_set)})

    async def evaluate(pipeline: OfflinePolicyOptimizationPipeline
                       ) -> list[PipelineEvaluationResult]:
        return [await pipeline.eval(loader, PipelineContext(epoch=0), at=commit,
                                    phase="candidate_eval" if n else "eval")
                for n, commit in enumerate(commits)]

    lifts: list[SkillLift] = []
    if executor is not None:
        pipeline = OfflinePolicyOptimizationPipeline(
            repo, ContentHashPolicySnapshotter(), executor, NoTrainer(), observer=observer)
        results = await evaluate(pipeline)
        made_by = run_provenance.of_runtime(None, agent, service_url=cases.service.url
                                            if isinstance(cases, RemoteCases) else None)
        report = _report("eval", repo, None, options, [r.metrics for r in results], started,
                         pipeline, made_by)
    else:
        tools = _tools(repo, options, eval_set)
        plan = run_budget.RunPlan(repo).evals(eval_set, len(commits))
        runtime, estimate = _open_planned(repo, options, plan)
        async with runtime, _user_llm(repo, options, runtime) as user_llm:
            _listen(runtime, observer)
            pipeline = build_pipeline(repo, runtime, concurrency=options.concurrency,
                                      observer=observer, tools=tools, user_llm=user_llm)
            results = await evaluate(pipeline)
            if base and new and skill_evals:
                lifts = await _skill_lifts(pipeline, base, new, skill_evals, options.trials)
            made_by = run_provenance.of_runtime(runtime)
            report = _report("eval", repo, runtime, options, [r.metrics for r in results],
                             started, pipeline, made_by, estimate)
    report.main_before = report.main_after = results[0].metrics.batches[0].policy_commit
    if compare is not None:
        candidate = results[1].metrics.batches[0].policy_commit
        report.candidates = [compare_runs(candidate[:ID_LEN], results[0].rollouts,
                                          results[1].rollouts, options.trials,
                                          options.gate)]
        report.candidates[0].agent_model = made_by.agent_model
        report.candidates[0].skill_lifts = lifts
        report.candidates[0].gate = gate_skill_lifts(options.gate, report.candidates[0])
    report.warnings = run_provenance.agent_warnings(repo, commits[-1:], made_by)
    return report


async def run_train_rollouts(repo: ExperienceRepository, rollouts_file: Path,
                             options: RunOptions) -> RunReport:
    """Train once on recorded rollouts against the current ``main``."""
    publisher = _publisher(repo, options)
    recorded = load_rollouts(rollouts_file)  # a bad file: refused before any model starts
    started = time.monotonic()
    main_before = repo.main_commit()
    observer = _observer(options, {"train_rollouts": len(recorded)})
    plan = run_budget.RunPlan(repo, rollouts_here=False).train([r.case for r in recorded],
                                                               rolled_out=True)
    runtime, estimate = _open_planned(repo, options, plan)
    made_by = run_provenance.of_runtime(runtime, run_provenance.recorded_agent(recorded))
    async with runtime:
        _listen(runtime, observer)
        pipeline = build_pipeline(repo, runtime, concurrency=options.concurrency,
                                  publisher=publisher, provenance=made_by)
        rollouts = pipeline.redactor.models(recorded)
        context = PipelineContext(mode=options.mode)
        if options.evaluator == "feedback":
            rollouts = await by_feedback(repo, rollouts, context)
        if observer is not None:  # recorded rollouts: all done, training only
            observer.phase_started("train_rollouts", 0)
            observer.stage("train")
        result = await pipeline.train_from_rollouts(rollouts, context)
        metrics = PhaseMetrics(phase="train_rollouts", epoch=0)
        record = BatchRecord(batch=0, cases=len(rollouts), policy_commit=main_before,
                             policy_snapshot_id=repo.snapshot(main_before).id)
        add_training(metrics, record, rollouts, result, options.mode)
        if observer is not None:
            observer.batch_done(metrics.phase, 0, len(rollouts))
            observer.phase_done(metrics)
        report = _report("train-rollouts", repo, runtime, options, [metrics], started,
                         pipeline, made_by, estimate)
    report.main_before, report.main_after = main_before, repo.main_commit()
    await _push_rest(report, publisher)
    return report
