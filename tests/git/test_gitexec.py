"""GitExecutor and run_git: git work off the event loop, on the executor made current
(one call at a time with one thread), else on the default pool; and the streaming
trainer running its submissions' and batches' git work on its own executor."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Sequence

import pytest
from streaming_fakes import CTX, POLICY, FakeAnalyzer, FakeEngine, FakeEstimator, rollout

from expgit.git.executor import LEARNING_CALLS, GitExecutor, current_executor, run_git
from expgit.store.snapshot import Snapshot
from expgit.train.components.streaming import StreamingPolicyTrainer
from expgit.train.context import PipelineContext
from expgit.train.domain import (
    PolicyApplyResult,
    PolicyUpdatePlan,
    RolloutAnalysis,
    SemanticGradient,
)

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_gitexec_var", default="")


class Overlap:
    """Counts how many calls run at once (the most seen in ``peak``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = self.peak = 0
        self.threads: set[str] = set()

    def __call__(self, value: int) -> int:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.threads.add(threading.current_thread().name)
        time.sleep(0.005)  # long enough for the others to start, were they let
        with self.lock:
            self.running -= 1
        return value * 2


def test_without_an_executor_run_git_is_to_thread() -> None:
    async def main() -> None:
        loop_thread = threading.current_thread().name
        assert current_executor() is None
        name = await run_git(lambda: threading.current_thread().name)
        assert name != loop_thread

    asyncio.run(main())


def test_one_thread_runs_the_calls_one_at_a_time_in_the_callers_context() -> None:
    executor = GitExecutor(1, name="test-git")
    overlap = Overlap()

    async def main() -> None:
        VAR.set("caller")
        with executor.current():
            assert current_executor() is executor
            results = await asyncio.gather(*(run_git(overlap, i) for i in range(8)))
            assert await run_git(VAR.get) == "caller"  # the context is copied
            # tasks created inside the block inherit it
            inner = asyncio.create_task(run_git(lambda: threading.current_thread().name))
            assert (await inner).startswith("test-git")
        assert current_executor() is None  # restored after the block
        assert results == [2 * i for i in range(8)]

    asyncio.run(main())
    executor.close()
    assert overlap.peak == 1 and len(overlap.threads) == 1
    assert next(iter(overlap.threads)).startswith("test-git")


def test_two_threads_and_close() -> None:
    executor = GitExecutor(2, name="test-two")
    overlap = Overlap()

    async def main() -> None:
        with executor.current():
            await asyncio.gather(*(run_git(overlap, i) for i in range(6)))
            executor.close()
            assert executor.closed
            # after close: still runs, on the default pool
            name = await run_git(lambda: threading.current_thread().name)
            assert not name.startswith("test-two")

    asyncio.run(main())
    assert 1 <= overlap.peak <= 2 and all(t.startswith("test-two") for t in overlap.threads)
    with pytest.raises(ValueError):
        GitExecutor(0)


def test_a_function_that_proved_quick_runs_on_the_loop_until_it_turns_slow() -> None:
    executor = GitExecutor(1, name="test-git", inline_below=0.05)
    delay = [0.0]

    def work() -> str:
        time.sleep(delay[0])
        return threading.current_thread().name

    def fails() -> None:
        VAR.set("changed")  # in a copy of the caller's context, inline too
        raise KeyError("inline failure")

    async def main() -> None:
        loop = threading.current_thread().name
        with executor.current():
            learned = [await run_git(work) for _ in range(LEARNING_CALLS)]
            assert all(name.startswith("test-git") for name in learned)
            assert await run_git(work) == loop  # proved quick: on the loop itself
            delay[0] = 0.4
            assert await run_git(work) == loop  # not known to be slow before it ran
            assert (await run_git(work)).startswith("test-git")  # now it is
            other = [await run_git(lambda: threading.current_thread().name)
                     for _ in range(LEARNING_CALLS + 1)]
            assert other[-1] == loop and all(n.startswith("test-git") for n in other[:-1])
            idents = [await run_git(threading.get_ident) for _ in range(LEARNING_CALLS + 1)]
            assert threading.get_ident() not in idents  # a builtin: never inline
            for _ in range(LEARNING_CALLS + 1):
                with pytest.raises(KeyError, match="inline failure"):
                    await run_git(fails)
            assert VAR.get() == ""

    asyncio.run(main())
    executor.close()


def test_inline_below_zero_keeps_every_call_on_the_threads() -> None:
    executor = GitExecutor(1, name="test-git", inline_below=0)

    async def main() -> list[str]:
        with executor.current():
            return [await run_git(lambda: threading.current_thread().name)
                    for _ in range(LEARNING_CALLS + 3)]

    names = asyncio.run(main())
    executor.close()
    assert all(name.startswith("test-git") for name in names)


class ThreadNoting:
    """Wraps the fakes: notes the thread each one's run_git call ran on."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    async def note(self) -> None:
        self.threads.append(await run_git(lambda: threading.current_thread().name))


class NotingAnalyzer(FakeAnalyzer):
    def __init__(self, noting: ThreadNoting) -> None:
        super().__init__()
        self.noting = noting

    async def analyze(self, rollout: object, context: PipelineContext) -> RolloutAnalysis:
        await self.noting.note()
        return await super().analyze(rollout, context)  # type: ignore[arg-type]


class NotingEstimator(FakeEstimator):
    def __init__(self, noting: ThreadNoting) -> None:
        self.noting = noting

    async def estimate(self, analysis: RolloutAnalysis, experience_set: Snapshot,
                       context: PipelineContext) -> list[SemanticGradient]:
        await self.noting.note()
        return await super().estimate(analysis, experience_set, context)


class NotingEngine(FakeEngine):
    def __init__(self, noting: ThreadNoting) -> None:
        super().__init__()
        self.noting = noting

    async def plan_and_apply(self, gradients: Sequence[SemanticGradient],
                             context: PipelineContext
                             ) -> tuple[PolicyUpdatePlan, PolicyApplyResult]:
        await self.noting.note()
        return await super().plan_and_apply(gradients, context)


def test_the_streaming_trainer_runs_its_git_work_on_its_own_executor() -> None:
    noting = ThreadNoting()

    async def main() -> None:
        trainer = StreamingPolicyTrainer(NotingAnalyzer(noting), NotingEstimator(noting),
                                         NotingEngine(noting), max_gradients_per_update=2,
                                         max_wait_seconds=100, git_inline_below=0)
        results = await asyncio.gather(*(trainer.submit_rollout(rollout(f"r{i}"), CTX,
                                                                POLICY) for i in range(4)))
        assert all(r.errors == [] and r.apply_result is not None for r in results)
        assert current_executor() is None  # the caller's context is left as it was
        await trainer.close()
        assert trainer.git_executor.closed

    asyncio.run(main())
    # 4 analyses, 4 estimates, 2 batches: all on the trainer's one git thread
    assert len(noting.threads) == 10
    assert {t.rsplit("_", 1)[0] for t in noting.threads} == {"expgit-streaming-git"}
