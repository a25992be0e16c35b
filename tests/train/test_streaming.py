"""StreamingPolicyTrainer with fake analyzer, estimator and engine (no git, no LLM)."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
from streaming_fakes import CTX, POLICY, FakeAnalyzer, FakeEngine, make, rollout

from expgit.errors import UsageError
from expgit.train.components.streaming import StreamingPolicyTrainer


def test_flush_by_count_and_scoped_results() -> None:
    async def main() -> None:
        trainer, engine = make(max_gradients_per_update=4, max_wait_seconds=100)
        results = await asyncio.wait_for(asyncio.gather(*(
            trainer.submit_rollout(rollout(f"r{i}", 2), CTX, POLICY) for i in range(4))), 5)
        assert sorted(map(len, engine.batches)) == [4, 4]
        for i, result in enumerate(results):
            mine = {f"r{i}#0", f"r{i}#1"}
            assert {g.gradient_id for g in result.gradients} == mine
            assert result.analyses[0].rollout.case.name == f"r{i}"
            assert result.plan is not None
            assert {gid for item in result.plan.items for gid in item.gradient_ids} == mine
            batch = next(n for n, b in enumerate(engine.batches) if mine <= set(b))
            assert result.apply_result is not None
            assert result.apply_result.proposal_id == f"proposal-{batch}"
            assert result.errors == []
        await trainer.close()

    asyncio.run(main())


def test_flush_by_time() -> None:
    async def main() -> None:
        trainer, engine = make(max_gradients_per_update=100, max_wait_seconds=0.3,
                               timer_check_interval_seconds=0.02)
        started = time.monotonic()
        results = await asyncio.wait_for(asyncio.gather(*(
            trainer.submit_rollout(rollout(f"r{i}"), CTX, POLICY) for i in range(3))), 5)
        waited = time.monotonic() - started
        assert 0.3 <= waited < 2.0
        assert [sorted(b) for b in engine.batches] == [["r0#0", "r1#0", "r2#0"]]
        assert all(r.apply_result and r.apply_result.proposal_id == "proposal-0"
                   for r in results)
        await trainer.close()

    asyncio.run(main())


def test_flush_by_close_then_refuses() -> None:
    async def main() -> None:
        trainer, engine = make(max_gradients_per_update=100, max_wait_seconds=100)
        tasks = [asyncio.create_task(trainer.submit_rollout(rollout(f"r{i}"), CTX, POLICY))
                 for i in range(3)]
        await asyncio.sleep(0.2)
        assert not any(t.done() for t in tasks) and engine.batches == []
        await asyncio.wait_for(trainer.close(), 5)
        await asyncio.wait_for(asyncio.gather(*tasks), 1)
        assert [sorted(b) for b in engine.batches] == [["r0#0", "r1#0", "r2#0"]]
        assert [len(t.result().gradients) for t in tasks] == [1, 1, 1]
        with pytest.raises(UsageError, match="closed"):
            await trainer.submit_rollout(rollout("late"), CTX, POLICY)

    asyncio.run(main())


def test_engine_error_fails_only_its_batch() -> None:
    async def main() -> None:
        trainer, engine = make(FakeEngine(fail={0}), max_gradients_per_update=2,
                               max_wait_seconds=100)
        first = await asyncio.gather(*(trainer.submit_rollout(rollout(f"a{i}"), CTX, POLICY)
                                       for i in range(2)))
        second = await asyncio.gather(*(trainer.submit_rollout(rollout(f"b{i}"), CTX, POLICY)
                                        for i in range(2)))
        assert len(engine.batches) == 2
        for result in first:
            assert result.plan is None and result.apply_result is None
            assert result.errors == ["update failed: batch 0 conflicts"]
            assert len(result.gradients) == 1  # its gradients are still reported
        for result in second:
            assert result.errors == []
            assert result.apply_result and result.apply_result.proposal_id == "proposal-1"
        await trainer.close()

    asyncio.run(main())


def test_zero_gradient_and_failed_rollouts_return_at_once() -> None:
    async def main() -> None:
        trainer, engine = make(FakeEngine(), FakeAnalyzer(fail={"bad"}),
                               max_gradients_per_update=100, max_wait_seconds=100)
        empty = await asyncio.wait_for(trainer.submit_rollout(rollout("none", 0), CTX,
                                                              POLICY), 1)
        assert empty.gradients == [] and empty.plan is None and empty.errors == []
        assert len(empty.analyses) == 1
        bad = await asyncio.wait_for(trainer.submit_rollout(rollout("bad"), CTX, POLICY), 1)
        assert bad.analyses == [] and bad.gradients == []
        assert bad.errors == ["case bad: analysis failed: analyzer refused bad"]
        assert engine.batches == []
        await trainer.close()

    asyncio.run(main())


def test_concurrent_producers_lose_nothing() -> None:
    random.seed(7)
    counts = {f"p{p}-{i}": random.randint(0, 3) for p in range(8) for i in range(25)}

    async def producer(trainer: StreamingPolicyTrainer, p: int) -> list[Any]:
        results = []
        for i in range(25):
            name = f"p{p}-{i}"
            results.append((name, await trainer.submit_rollout(
                rollout(name, counts[name]), CTX, POLICY)))
        return results

    async def main() -> None:
        trainer, engine = make(FakeEngine(delay=0.005), max_gradients_per_update=5,
                               max_wait_seconds=0.05, timer_check_interval_seconds=0.01)
        per_producer = await asyncio.wait_for(
            asyncio.gather(*(producer(trainer, p) for p in range(8))), 30)
        await trainer.close()
        applied = [gid for batch in engine.batches for gid in batch]
        expected = {f"{n}#{i}" for n, c in counts.items() for i in range(c)}
        assert sorted(applied) == sorted(expected)  # each gradient exactly once
        assert all(len(b) <= 5 for b in engine.batches)  # no rollout has more than 3
        for name, result in (pair for results in per_producer for pair in results):
            mine = {f"{name}#{i}" for i in range(counts[name])}
            assert {g.gradient_id for g in result.gradients} == mine
            cited = {g for item in (result.plan.items if result.plan else [])
                     for g in item.gradient_ids}
            assert cited == mine
            assert (result.apply_result is None) == (not mine)

    asyncio.run(main())


def test_train_rollouts_merges_batches() -> None:
    async def main() -> None:
        trainer, engine = make(FakeEngine(fail={1}), max_gradients_per_update=3,
                               max_wait_seconds=100)
        rollouts = [rollout(f"r{i}", 2) for i in range(4)] + [rollout("zero", 0)]
        result = await asyncio.wait_for(trainer.train_rollouts(rollouts, POLICY, CTX), 5)
        # r0 (2) + r1 (2) > 3: one rollout per batch, never split
        assert [len(b) for b in engine.batches] == [2, 2, 2, 2]
        assert len(result.analyses) == 5 and len(result.gradients) == 8
        assert result.errors == ["update failed: batch 1 conflicts"]
        assert result.apply_result is not None
        ids = [b.proposal_id for b in result.apply_result.metadata.batches or []]
        assert ids == ["proposal-0", "proposal-2", "proposal-3"]
        assert result.plan is not None and len(result.plan.items) == 6
        await trainer.close()

    asyncio.run(main())


def test_bad_settings_are_refused() -> None:
    with pytest.raises(UsageError):
        make(max_gradients_per_update=0)


def test_trainer_survives_its_event_loop() -> None:
    """Used from two ``asyncio.run`` calls (the CLI's way): the batcher restarts."""
    trainer, engine = make(max_gradients_per_update=1, max_wait_seconds=100)
    for name in ("first", "second"):
        result = asyncio.run(asyncio.wait_for(trainer.submit_rollout(
            rollout(name), CTX, POLICY), 5))
        assert result.errors == [] and result.apply_result is not None
    assert engine.batches == [["first#0"], ["second#0"]]
    asyncio.run(trainer.close())  # its worker died with the last loop: nothing to wait for
