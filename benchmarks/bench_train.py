"""Benchmark the training pipeline's LLM economy and its git overhead.

Run by hand (this is not a test)::

    python benchmarks/bench_train.py [--rollouts 1000] [--producers 8] [--latency 0.2]
                                     [--mode apply|propose] [--skip-streaming]
                                     [--dir PATH]

1. **LLM calls and tokens** on ``example_repo`` (``cases/train.yaml``, ``cases/eval.yaml``)
   with an in-process fake LLM that answers every stage validly: baseline eval, one
   training epoch (``--batch-size`` cases per batch) and final eval, each phase metered
   separately, once with ``[train] calls_per_rollout = 2`` (analyze + estimate) and once
   with 1 (reflect, the default), side by side. Targets of the default: 1.0 training
   call per rollout, 1 merge call per chunk of <= 16 gradients, no call in eval beyond
   the rollouts themselves (plus ``llm_judge`` criteria, which the example eval cases do
   not use), and tokens per training rollout at least 30% below the 7,854 of the two
   calls when issue 18 was filed.
2. **Streaming**: ``--producers`` tasks submit ``--rollouts`` recorded rollouts to one
   StreamingPolicyTrainer (real reflector, patch-merge optimizer, git updater
   and engine on a real repository), the fake LLM answering after ``--latency`` seconds.
   Every GitRepo method is timed (outermost call per thread); the figure is the union of
   the intervals during which some git operation ran, as a share of the wall time
   (target < 5%), with the summed per-thread time beside it. Afterwards every gradient
   must be cited by a proposal, applied in ``--mode apply`` (then its experience must be
   on ``main``): "lost updates" counts those that are not (target 0). Last, ``git fsck
   --strict`` of the repository must find it clean.

``--dir PATH`` makes the repositories there (default: the system's temporary folder), e.g.
``--dir /dev/shm`` (tmpfs) to tell the file system's cost from expgit's own.

Before the streaming run the script times creating 200 empty files in the repository's
folder and prints the median: the git share follows it. On ext4 without a journal (as on
the machine these figures come from) the kernel will not reuse an inode deleted less
than 60 s ago (300 s while its inode table block is unwritten) and scans past every such
inode on each file it creates in that block group; right after another run's temporary
repository (~10,000 files) was deleted there, every object, lock and ref expgit writes
pays for it (a 4.4% share becomes 6.7%). Wait a few minutes between runs, or give each
run a fresh folder (``--dir``), to measure expgit rather than the previous run.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_idle import file_creation_cost  # noqa: E402

from expgit.core.domain import (  # noqa: E402
    Case,
    Message,
    Rollout,
    RolloutTrainingResult,
    Rubric,
    RubricCriterion,
    RubricEvaluation,
)
from expgit.git.repo import GitRepo  # noqa: E402
from expgit.init import init_repository  # noqa: E402
from expgit.llm.factory import LLMRuntime  # noqa: E402
from expgit.llm.port import ChatMessages, Completion, StageUsage, UsageMeter  # noqa: E402
from expgit.runs.wiring import build_pipeline  # noqa: E402
from expgit.store.repository import ExperienceRepository  # noqa: E402
from expgit.store.workflow.proposals import list_proposals  # noqa: E402
from expgit.train.cases import ListCaseLoader, load_cases  # noqa: E402
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator  # noqa: E402
from expgit.train.components.policy_optimizer import PatchMergePolicyOptimizer  # noqa: E402
from expgit.train.components.policy_updater import GitPolicyUpdater  # noqa: E402
from expgit.train.components.rollout_reflector import OneCallRolloutReflector  # noqa: E402
from expgit.train.components.streaming import StreamingPolicyTrainer  # noqa: E402
from expgit.train.components.trajectory_analyzer import (  # noqa: E402
    TrajectoryRolloutAnalyzer,
)
from expgit.train.context import PipelineContext  # noqa: E402
from expgit.train.engine import PolicyTrainingEngine  # noqa: E402
from expgit.train.measurement.candidate_stage import CandidateStage  # noqa: E402

EXAMPLE = ROOT / "example_repo"
_GRADIENT = re.compile(r"^### Gradient (\S+): \w+ `([a-z0-9-]+)`", re.M)


# ------------------------------------------------------------------------ fake LLM
def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def lesson(name: str) -> dict[str, Any]:
    """The fields (not the file: expgit composes it) of the lesson ``name``."""
    return {"summary": f"What run {name} taught.", "tags": ["bench"],
            "body": f"# Lesson {name}\n\nWhen: a case like {name} comes up.\n\n"
                    f"Procedure:\n1. Apply the rule {name} records before answering.\n",
            "rationale": "learned", "confidence": 0.7}


def _reply(stage: str, messages: ChatMessages) -> str:
    user = messages[-1]["content"]
    if stage == "rollout":
        return "I checked the policy: this is eligible within 24 hours; insurance applies."
    if stage == "judge":
        return json.dumps({"passed": True, "score": 1.0, "reason": "fine"})
    if stage == "analyze":
        anchor = f"run {_digest(user)}"
        return json.dumps({"title": f"Lesson from {anchor}", "outcome": "partial",
                           "summary": "The agent missed a rule.", "key_steps": ["answer"],
                           "mistakes": ["skipped a check"], "lessons": ["check first"],
                           "retrieval_anchor": anchor})
    if stage == "estimate":
        name = f"lesson-{_digest(user)}"
        return json.dumps({"edits": [{"name": name, "action": "create", **lesson(name)}]})
    if stage == "reflect":
        anchor, name = f"run {_digest(user)}", f"lesson-{_digest(user)}"
        return json.dumps({"title": f"Lesson from {anchor}", "outcome": "partial",
                           "summary": "The agent missed a rule.", "key_steps": ["answer"],
                           "mistakes": ["skipped a check"], "lessons": ["check first"],
                           "retrieval_anchor": anchor,
                           "edits": [{"name": name, "action": "create", **lesson(name)}]})
    if stage == "merge":
        items: dict[str, list[str]] = {}
        for gid, target in _GRADIENT.findall(user):
            items.setdefault(target, []).append(gid)
        return json.dumps({"items": [{"name": t, "action": "upsert", "gradient_ids": ids,
                                      **lesson(t)} for t, ids in items.items()]})
    raise AssertionError(f"unexpected stage {stage}")


class FakeChat:
    """Answers every stage validly after ``delay`` seconds; counts like a real model."""

    model = "fake"

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    async def complete(self, messages: ChatMessages, *, stage: str,
                       response_format: dict[str, Any] | None, max_tokens: int,
                       temperature: float) -> Completion:
        if self.delay:
            await asyncio.sleep(self.delay)
        text = _reply(stage, messages)
        return Completion(text=text, finish_reason="stop", model=self.model,
                          prompt_tokens=sum(len(m["content"]) for m in messages) // 4,
                          completion_tokens=len(text) // 4)


def _delta(before: dict[str, StageUsage], after: dict[str, StageUsage]
           ) -> dict[str, StageUsage]:
    out = {}
    for stage, usage in after.items():
        old = before.get(stage, StageUsage())
        if usage.calls != old.calls:
            out[stage] = StageUsage(calls=usage.calls - old.calls,
                                    prompt_tokens=usage.prompt_tokens - old.prompt_tokens,
                                    completion_tokens=usage.completion_tokens
                                    - old.completion_tokens)
    return out


def _fresh_repo(where: Path) -> ExperienceRepository:
    init_repository(where, seed=EXAMPLE, bare=True)
    return ExperienceRepository.open(where)


# -------------------------------------------------------------------- part 1: calls
BEFORE_ONE_CALL = 7854  # tokens per training rollout when issue 18 was filed (two calls)
TRAINING_STAGES = ("reflect", "analyze", "estimate")
Phases = list[tuple[str, int, dict[str, StageUsage]]]


async def _run_calls(batch_size: int, where: str | None, calls: int
                     ) -> tuple[Phases, list[Any]]:
    """Baseline eval, one training epoch and final eval on a copy of example_repo with
    ``[train] calls_per_rollout = calls``; each phase's usage by stage."""
    train, held_out = (load_cases(EXAMPLE / "cases" / f) for f in ("train.yaml", "eval.yaml"))
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        seed = Path(tmp) / "seed"
        shutil.copytree(EXAMPLE, seed)
        settings = seed / "expgit.toml"
        settings.write_text(settings.read_text() + f"\n[train]\ncalls_per_rollout = {calls}\n")
        init_repository(Path(tmp) / "repo.git", seed=seed, bare=True)
        repo = ExperienceRepository.open(Path(tmp) / "repo.git")
        meter = UsageMeter()
        runtime = LLMRuntime.fixed(FakeChat(), meter=meter)
        pipeline = build_pipeline(repo, runtime, concurrency=8)
        phases: Phases = []
        trained: list[Any] = []
        for phase, cases in (("baseline_eval", held_out), ("train_epoch", train),
                             ("final_eval", held_out)):
            before = meter.by_stage()
            if phase == "train_epoch":
                result = await pipeline.train(ListCaseLoader(cases, batch_size),
                                              PipelineContext(mode="propose"))
                trained = result.epochs[0].batches
            else:
                await pipeline.eval(ListCaseLoader(cases, len(cases)), PipelineContext())
            phases.append((phase, len(cases), _delta(before, meter.by_stage())))
    return phases, trained


def _print_phases(calls: int, phases: Phases) -> None:
    print(f"-- [train] calls_per_rollout = {calls}")
    print(f"{'phase':<14}{'cases':>6}  {'stage':<9}{'calls':>6}{'prompt tok':>12}"
          f"{'compl tok':>11}{'calls/case':>12}")
    for phase, n, usage in phases:
        for stage, u in usage.items():
            print(f"{phase:<14}{n:>6}  {stage:<9}{u.calls:>6}{u.prompt_tokens:>12}"
                  f"{u.completion_tokens:>11}{u.calls / n:>12.2f}")


def _training_figures(phases: Phases, trained: list[Any]) -> dict[str, float]:
    _, n, usage = phases[1]
    chunks = sum(math.ceil(b.gradients / 16) for b in trained)
    training = [u for s, u in usage.items() if s in TRAINING_STAGES]
    return {
        "calls/rollout": sum(u.calls for u in training) / n,
        "merge calls/chunk": sum(usage[s].calls for s in ("merge", "compress")
                                 if s in usage) / max(chunks, 1),
        "training prompt tok/rollout": sum(u.prompt_tokens for u in training) / n,
        "prompt tok/rollout": sum(u.prompt_tokens for u in usage.values()) / n,
        "tokens/rollout": sum(u.prompt_tokens + u.completion_tokens
                              for u in usage.values()) / n,
        "gradients": sum(b.gradients for b in trained),
        "proposals": sum(len(b.proposals) for b in trained),
        "errors": sum(len(b.errors) for b in trained),
        "eval calls beyond rollouts": sum(u.calls for p in (phases[0], phases[2])
                                          for s, u in p[2].items() if s != "rollout"),
    }


async def bench_calls(batch_size: int, where: str | None) -> None:
    """Both training paths on the same cases; targets of the one-call path: 1.0 call per
    training rollout, 1 merge call per chunk of <= 16 gradients, 0 extra calls in eval,
    and tokens per training rollout at least 30% below the two-call figure of 7,854."""
    print("== LLM calls and tokens (example_repo, fake LLM: 4 characters a token) ==")
    figures: dict[int, dict[str, float]] = {}
    for calls in (2, 1):
        phases, trained = await _run_calls(batch_size, where, calls)
        _print_phases(calls, phases)
        figures[calls] = _training_figures(phases, trained)
    print(f"\n{'per training rollout':<30}{'2 calls':>10}{'1 call':>10}{'ratio':>8}")
    for key, two in figures[2].items():
        one = figures[1][key]
        ratio = f"{one / two:.2f}" if two else "-"
        print(f"{key:<30}{two:>10.2f}{one:>10.2f}{ratio:>8}")
    one = figures[1]["tokens/rollout"]
    print(f"tokens per training rollout, 1 call: {one:.0f} against {BEFORE_ONE_CALL:,} when "
          f"the issue was filed: {1 - one / BEFORE_ONE_CALL:.0%} fewer (target >= 30%); "
          f"against 2 calls today: {1 - one / figures[2]['tokens/rollout']:.0%} fewer")
    one_t, two_t = (figures[c]["training prompt tok/rollout"] for c in (1, 2))
    print(f"training prompt tokens (the reflect, analyze and estimate calls) per rollout: "
          f"{one_t:.0f} against {two_t:.0f}: {1 - one_t / two_t:.0%} fewer")


# ------------------------------------------------------- part 1b: apply-mode evals
async def bench_apply_evals(batch_size: int, where: str | None) -> None:
    """``train --mode apply`` with held-out cases (baseline, candidate eval of each
    proposal, final eval), the LLM calls of each eval phase. The final eval of a tree the
    run already measured reuses that measurement; "before" adds what running it again
    costs (an eval of the same ``main``, as the final eval did before it was reused)."""
    train, held_out = (load_cases(EXAMPLE / "cases" / f) for f in ("train.yaml", "eval.yaml"))
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        repo = _fresh_repo(Path(tmp) / "repo.git")
        meter = UsageMeter()
        runtime = LLMRuntime.fixed(FakeChat(), meter=meter)
        stage = CandidateStage(repo, apply=True)
        pipeline = build_pipeline(repo, runtime, concurrency=8, candidates=stage)
        result = await pipeline.train(ListCaseLoader(train, batch_size),
                                      PipelineContext(mode="apply"),
                                      ListCaseLoader(held_out, len(held_out)))
        phases = result.phases
        after = meter.total().calls
        before_rerun = meter.by_stage()
        await pipeline.eval(ListCaseLoader(held_out, len(held_out)), PipelineContext())
        rerun = sum(u.calls for u in _delta(before_rerun, meter.by_stage()).values())
    applied = sum(len(p.applied_commits) for p in phases)
    final = phases[-1]
    print(f"\n== train --mode apply, {len(held_out)} held-out cases, {len(train)} training "
          f"cases in batches of {batch_size}: {applied} proposals applied ==")
    print("eval phases: " + ", ".join(f"{p.phase}{' (reused ' + p.reused + ')' if p.reused else ''}"
                                     for p in phases if p.phase != "train_epoch"))
    print(f"{'':<28}{'before':>8}{'after':>8}{'ratio':>8}")
    print(f"{'final eval calls':<28}{rerun:>8}{0 if final.reused else rerun:>8}"
          f"{(0 if final.reused else rerun) / rerun if rerun else 0:>8.2f}")
    before = after + (rerun if final.reused else 0)
    print(f"{'run calls':<28}{before:>8}{after:>8}{after / before:>8.2f}")


# ------------------------------------------------------------ part 2: git share
class GitClock:
    """Times every GitRepo method (outermost call per thread) as intervals."""

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []
        self.by_method: dict[str, list[float]] = {}
        self._local = threading.local()
        self._lock = threading.Lock()

    def install(self) -> None:
        for name, value in list(vars(GitRepo).items()):
            if name.startswith("__") or isinstance(value, classmethod | property):
                continue
            if isinstance(value, staticmethod):
                setattr(GitRepo, name, staticmethod(self._wrap(value.__func__)))
            elif callable(value):
                setattr(GitRepo, name, self._wrap(value))

    def _wrap(self, func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._local, "depth", 0)
            self._local.depth = depth + 1
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                self._local.depth = depth
                if depth == 0:
                    end = time.perf_counter()
                    with self._lock:
                        self.intervals.append((start, end))
                        calls = self.by_method.setdefault(func.__name__, [0, 0.0])
                        calls[0] += 1
                        calls[1] += end - start
        return timed

    def totals(self, since: float) -> tuple[float, float]:
        """(union of the intervals, their sum) after ``since``, in seconds."""
        spans = sorted((max(s, since), e) for s, e in self.intervals if e > since)
        union, end = 0.0, since
        for s, e in spans:
            if e > end:
                union += e - max(s, end)
                end = e
        return union, sum(e - s for s, e in spans)


def _rollout(i: int) -> Rollout:
    case = Case(name=f"stream-{i}", task_signature="stream", input={"user_query": f"q{i}"},
                rubric=Rubric(name="r", criteria=[RubricCriterion(name="ok")]))
    return Rollout(case=case, policy_snapshot_id="recorded", messages=[
        Message.text("user", f"Question number {i}: can I change my flight?"),
        Message.text("assistant", f"Answer {i}: no, basic economy cannot be changed.")],
        evaluation=RubricEvaluation(passed=i % 3 != 0, score=0.5))


async def bench_streaming(rollouts: int, producers: int, latency: float, mode: str,
                          where: str | None) -> None:
    clock = GitClock()
    clock.install()
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        creation = file_creation_cost(Path(tmp))
        repo = _fresh_repo(Path(tmp) / "repo.git")
        meter = UsageMeter()
        runtime = LLMRuntime.fixed(FakeChat(latency), meter=meter)
        llm = runtime.structured
        engine = PolicyTrainingEngine(repo, PatchMergePolicyOptimizer(repo, llm),
                                      GitPolicyUpdater(repo))
        analyzer = TrajectoryRolloutAnalyzer(repo, llm)
        estimator = ExperienceGradientEstimator(repo, llm)
        trainer = StreamingPolicyTrainer(analyzer, estimator, engine,
                                         max_gradients_per_update=8, max_wait_seconds=2.0,
                                         timer_check_interval_seconds=0.1,
                                         reflector=OneCallRolloutReflector(
                                             analyzer, estimator, llm))
        context = PipelineContext(mode="apply" if mode == "apply" else "propose")
        results: list[RolloutTrainingResult] = []
        queue = list(range(rollouts))

        async def producer() -> None:
            while queue:
                results.append(await trainer.submit_rollout(_rollout(queue.pop()), context))

        started = time.perf_counter()
        await asyncio.gather(*(producer() for _ in range(producers)))
        await trainer.close()
        wall = time.perf_counter() - started
        union, summed = clock.totals(started)
        print(f"\n(repository in {tmp}; creating a file there took "
              f"{creation * 1e6:.0f} us before the run, median: ~10 us on a quiet ext4 "
              "folder, more after mass deletions nearby, see the docstring)")
        _verify(repo, results, wall, union, summed, trainer, meter, mode, latency, producers)
        top = sorted(clock.by_method.items(), key=lambda kv: -kv[1][1])[:8]
        print("git time by GitRepo method (outermost calls): " + ", ".join(
            f"{name} {int(n)}x {t:.2f}s" for name, (n, t) in top))
        raw = raw_git_per_rollout(repo, samples=40)
        mine = union / max(len(results), 1)
        print(f"git time per rollout: expgit {mine * 1000:.2f} ms; the same writes through raw "
              f"git plumbing {raw * 1000:.2f} ms (ratio {mine / raw:.2f}x)")


def raw_git_per_rollout(repo: ExperienceRepository, samples: int) -> float:
    """Seconds per rollout for what the streaming path writes per rollout (a trajectory
    commit on the trajectories branch, a gradient commit of one experience on top of
    ``main``: one blob, two trees, one commit and one ref move each) done with git
    plumbing (``hash-object -w``, ``ls-tree``, ``mktree``, ``commit-tree``,
    ``update-ref``) in the same repository, one process per step."""
    where = repo.git.git_dir

    def git(*args: str, data: str | None = None) -> str:
        proc = subprocess.run(["git", *args], cwd=where, input=data, text=True,
                              capture_output=True)
        if proc.returncode:
            raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    tips = {"trajectories": git("rev-parse", "refs/heads/expgit/trajectories").strip(),
            "experiences": git("rev-parse", "refs/heads/main").strip()}
    started = time.perf_counter()
    for i in range(samples):
        for folder, tip in tips.items():
            blob = git("hash-object", "-w", "--stdin",
                       data=f"raw document {i} {folder}\n").strip()
            sub = git("mktree", data=git("ls-tree", f"{tip}:{folder}")
                      + f"100644 blob {blob}\traw-{i}.md\n").strip()
            root = git("mktree", data="".join(
                (line if not line.endswith(f"\t{folder}") else f"040000 tree {sub}\t{folder}")
                + "\n" for line in git("ls-tree", tip).splitlines())).strip()
            commit = git("commit-tree", root, "-p", tip, "-m", f"raw {i}").strip()
            ref = f"refs/heads/raw/{folder}" if folder == "trajectories" else f"refs/raw/{i}"
            git("update-ref", "-m", "raw", ref, commit)
    return (time.perf_counter() - started) / samples


def _verify(repo: ExperienceRepository, results: list[RolloutTrainingResult], wall: float,
            union: float, summed: float, trainer: StreamingPolicyTrainer, meter: UsageMeter,
            mode: str, latency: float, producers: int) -> None:
    gradients = {g.metadata["commit"]: g.target_experience_name
                 for r in results for g in r.gradients}
    states = ("applied",) if mode == "apply" else ("open", "applied")
    cited = {sha for p in list_proposals(repo, states) for sha in p.gradient_commits}
    main = set(repo.snapshot().names())
    lost = [sha for sha, name in gradients.items()
            if sha not in cited or (mode == "apply" and name not in main)]
    errors = [e for r in results for e in r.errors]
    print(f"== Streaming: {len(results)} rollouts, {producers} producers, "
          f"{latency * 1000:.0f} ms fake LLM, mode {mode} ==")
    print(f"wall time: {wall:.1f} s; batches applied: {trainer.batches_applied}; "
          f"gradients: {len(gradients)}; errors: {len(errors)}"
          + (f" (first: {errors[0]})" if errors else ""))
    print(f"git time (union of intervals): {union:.2f} s = {100 * union / wall:.2f}% of "
          "wall time (target < 5%)")
    print(f"git time (summed over threads): {summed:.2f} s = {100 * summed / wall:.2f}%")
    calls = {s: u.calls for s, u in meter.by_stage().items()}
    print(f"LLM calls: {calls}")
    print(f"lost updates: {len(lost)} (target 0)")
    fsck = subprocess.run(["git", "fsck", "--strict", "--no-progress"], cwd=repo.git.git_dir,
                          capture_output=True, text=True)
    problems = (fsck.stdout + fsck.stderr).strip()
    print("git fsck --strict: " + ("clean" if fsck.returncode == 0 and not problems
                                   else f"exit {fsck.returncode}: {problems[:500]}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--mode", choices=("apply", "propose"), default="apply")
    parser.add_argument("--skip-streaming", action="store_true")
    parser.add_argument("--dir", default=None, metavar="PATH",
                        help="make the repositories in PATH (e.g. /dev/shm: tmpfs) instead "
                             "of the system's temporary folder")
    args = parser.parse_args()
    asyncio.run(bench_calls(args.batch_size, args.dir))
    asyncio.run(bench_apply_evals(args.batch_size, args.dir))
    if not args.skip_streaming:
        asyncio.run(bench_streaming(args.rollouts, args.producers, args.latency, args.mode,
                                    args.dir))


if __name__ == "__main__":
    main()
