"""Benchmark group reflection's LLM economy against one reflect call per rollout.

Run by hand (this is not a test)::

    python benchmarks/bench_groups.py [--group-size 4] [--batch-size 8] [--dir PATH]

One training epoch on ``example_repo/cases/train.yaml`` with an in-process fake LLM
(``bench_train.FakeChat``'s replies, 4 characters a token), once as today
(``group_size`` 1: one ``reflect`` call per rollout) and once in groups of
``--group-size``, side by side. The fake agent is seeded: a run with its own seed (a
group's) answers with one of three canned answers drawn from that seed and the case, so
some runs of a case pass and others fail, and some groups all fail alike (skipped); a
run without one (group size 1) gives ``bench_train``'s single answer, so the K = 1
column is today's figure. Targets at K = 4, per training rollout: reflect calls at most
0.35 (skipped groups count 0), reflect prompt tokens at most half of today's 2,076, and
1 merge call per chunk of at most 16 gradients, as today.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import shutil
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_train import EXAMPLE, FakeChat, _delta, _digest, lesson  # noqa: E402

from expgit.init import init_repository  # noqa: E402
from expgit.llm.factory import LLMRuntime  # noqa: E402
from expgit.llm.port import ChatMessages, Completion, UsageMeter  # noqa: E402
from expgit.runs.wiring import build_pipeline  # noqa: E402
from expgit.store.repository import ExperienceRepository  # noqa: E402
from expgit.train.cases import ListCaseLoader, load_cases  # noqa: E402
from expgit.train.context import PipelineContext  # noqa: E402

TODAY_REFLECT_TOKENS = 2076  # reflect prompt tokens per training rollout (issue 26)
ANSWERS = (
    "I cannot cancel this reservation: free cancellation only applies within 24 hours "
    "of booking, and nothing has been cancelled.",
    "Yes, it is eligible: I can cancel it, and the refund goes to the original payment "
    "method. Do you confirm (yes) that I should proceed?",
    "I checked the policy: this is eligible within 24 hours; insurance applies.",
)
REFLECT_STAGES = ("reflect", "group_reflect")


class SeededFakeChat(FakeChat):
    """bench_train's fake, with a seeded agent and a group reflection."""

    async def complete(self, messages: ChatMessages, *, stage: str,
                       response_format: dict[str, Any] | None, max_tokens: int,
                       temperature: float, seed: int | None = None) -> Completion:
        user = messages[-1]["content"]
        if stage == "rollout" and seed is not None:
            draw = random.Random(seed * 7919 + zlib.crc32(user.encode()))
            text = draw.choice(ANSWERS)
        elif stage == "group_reflect":
            anchor, name = f"group {_digest(user)}", f"lesson-{_digest(user)}"
            text = json.dumps({
                "title": f"Lesson from {anchor}", "summary": "The runs differed.",
                "difference": "the better run cited the rule", "key_steps": ["answer"],
                "mistakes": ["skipped a check"], "lessons": ["check first"],
                "retrieval_anchor": anchor,
                "edits": [{"name": name, "action": "create", **lesson(name)}]})
        else:
            return await super().complete(messages, stage=stage,
                                          response_format=response_format,
                                          max_tokens=max_tokens, temperature=temperature)
        return Completion(text=text, finish_reason="stop", model=self.model,
                          prompt_tokens=sum(len(m["content"]) for m in messages) // 4,
                          completion_tokens=len(text) // 4)


async def run_epoch(group_size: int, batch_size: int, where: str | None
                    ) -> dict[str, float]:
    """One training epoch on a fresh copy of example_repo; its figures per rollout."""
    cases = load_cases(EXAMPLE / "cases" / "train.yaml")
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        seed = Path(tmp) / "seed"
        shutil.copytree(EXAMPLE, seed)
        init_repository(Path(tmp) / "repo.git", seed=seed, bare=True)
        repo = ExperienceRepository.open(Path(tmp) / "repo.git")
        meter = UsageMeter()
        pipeline = build_pipeline(repo, LLMRuntime.fixed(SeededFakeChat(), meter=meter),
                                  concurrency=8, group_size=group_size)
        before = meter.by_stage()
        result = await pipeline.train(ListCaseLoader(cases, batch_size),
                                      PipelineContext(mode="propose"))
        usage = _delta(before, meter.by_stage())
    epoch = result.epochs[0]
    rollouts = len(epoch.rollouts)
    reflect = [u for s, u in usage.items() if s in REFLECT_STAGES]
    chunks = sum(math.ceil(b.gradients / 16) for b in epoch.batches)
    groups = epoch.groups
    summary = epoch.summary
    return {
        "rollouts": rollouts,
        "reflect calls/rollout": sum(u.calls for u in reflect) / rollouts,
        "reflect prompt tok/rollout": sum(u.prompt_tokens for u in reflect) / rollouts,
        "merge calls/chunk": sum(usage[s].calls for s in ("merge", "compress")
                                 if s in usage) / max(chunks, 1),
        "merge calls": sum(usage[s].calls for s in ("merge", "compress") if s in usage),
        "gradients": epoch.gradients,
        "groups reflected": groups.reflected if groups else rollouts,
        "groups skipped": groups.skipped if groups else 0,
        "pass^1": summary.pass_k["1"] if summary else epoch.accuracy,
        f"pass^{group_size}": summary.pass_k[str(group_size)] if summary else epoch.accuracy,
        "errors": len(epoch.errors),
    }


async def bench(group_size: int, batch_size: int, where: str | None) -> None:
    print(f"== Group reflection: example_repo train cases, fake LLM, batches of "
          f"{batch_size} cases ==")
    today = await run_epoch(1, batch_size, where)
    grouped = await run_epoch(group_size, batch_size, where)
    column = f"K={group_size}"
    print(f"\n{'per training rollout':<30}{'K=1':>10}{column:>10}{'ratio':>8}")
    for key in grouped:
        one = today.get(key.replace(f"^{group_size}", "^1"), today.get(key, 0.0))
        many = grouped[key]
        ratio = f"{many / one:.2f}" if one else "-"
        print(f"{key:<30}{one:>10.2f}{many:>10.2f}{ratio:>8}")
    calls = grouped["reflect calls/rollout"]
    tokens = grouped["reflect prompt tok/rollout"]
    print(f"\nreflect calls per rollout at K={group_size}: {calls:.3f} (target <= 0.35)")
    print(f"reflect prompt tokens per rollout: {tokens:.0f} against {TODAY_REFLECT_TOKENS:,} "
          f"today ({today['reflect prompt tok/rollout']:.0f} measured here): "
          f"{tokens / TODAY_REFLECT_TOKENS:.2f} of it (target <= 0.50)")
    print(f"merge calls per chunk of <= 16 gradients: {grouped['merge calls/chunk']:.2f} "
          f"(target 1, as today: {today['merge calls/chunk']:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--dir", default=None, metavar="PATH",
                        help="make the repositories in PATH instead of the system's "
                             "temporary folder")
    args = parser.parse_args()
    asyncio.run(bench(args.group_size, args.batch_size, args.dir))


if __name__ == "__main__":
    main()
