"""A toy environment for the remote protocol tests and benchmark: cases ``toy-<split>-<i>``,
a rollout that echoes the request (after ``delay`` seconds), with cases that fail, hang or
tamper with the snapshot id; it records how many rollouts ran at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from expgit.core.domain import (
    Case,
    CriterionResult,
    Message,
    Rollout,
    Rubric,
    RubricCriterion,
    RubricEvaluation,
)
from expgit.errors import NotFoundError
from expgit.remote.protocol import CaseQuery, Health, RolloutRequest
from expgit.store.derived.snapshot import Snapshot

SNAPSHOT = Snapshot(commit="c" * 40, id="t" * 40, root="experiences", entries={}, strays=[])


def toy_case(split: str, index: int, *, padding: str = "") -> Case:
    name = f"toy-{split}-{index}"
    return Case(name=name, task_signature=f"toy:{split}:{index}",
                input={"user_query": f"question {index}{padding}"},
                rubric=Rubric(name=name, criteria=[RubricCriterion(name="echo")]),
                metadata={"dataset": "toy", "split": split})


def toy_rollout(request: RolloutRequest, snapshot_id: str | None = None) -> Rollout:
    case = request.case
    return Rollout(
        case=case,
        messages=[Message.text("user", str(case.input.get("user_query"))),
                  Message.text("assistant", f"answer to {case.name}")],
        policy_snapshot_id=snapshot_id or request.execution_context.policy_snapshot_id,
        evaluation=RubricEvaluation(passed=True, score=1.0, criterion_results=[
            CriterionResult(criterion_name="echo", passed=True, score=1.0)]),
        metadata={"policy_set": request.policy_set.model_dump(),
                  "execution_metadata": request.execution_context.metadata,
                  "options": request.options})


class ToyEnvironment:
    """Implements expgit.remote.sdk.Environment."""

    def __init__(self, splits: dict[str, int] | None = None, *, delay: float = 0.0,
                 fail: Sequence[str] = (), hang: Sequence[str] = (),
                 tamper: Sequence[str] = ()) -> None:
        self.splits = {split: [toy_case(split, i) for i in range(n)]
                       for split, n in (splits or {"train": 5}).items()}
        self.delay = delay
        self.fail, self.hang, self.tamper = set(fail), set(hang), set(tamper)
        self.lock = threading.Lock()
        self.running = 0
        self.max_running = 0
        self.started: list[str] = []
        self.finished: list[str] = []
        self.queries = 0

    def describe(self) -> Health:
        return Health(service="toy-env", version="1.0", metadata={"splits": list(self.splits)})

    def query_cases(self, query: CaseQuery) -> Sequence[Case]:
        with self.lock:
            self.queries += 1
        if query.split is None:
            return [c for cases in self.splits.values() for c in cases]
        if query.split not in self.splits:
            raise NotFoundError(f"no split {query.split!r} in the toy environment")
        return self.splits[query.split]

    async def run_rollout(self, request: RolloutRequest) -> Rollout:
        name = request.case.name
        with self.lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.started.append(name)
        try:
            if name in self.hang:
                await asyncio.Event().wait()
            if self.delay:
                await asyncio.sleep(self.delay)
            if name in self.fail:
                raise RuntimeError(f"toy failure for {name}")
            rollout = toy_rollout(request, "tampered" if name in self.tamper else None)
            with self.lock:
                self.finished.append(name)
            return rollout
        finally:
            with self.lock:
                self.running -= 1
