"""ExecutionRegistry: the rollout executions of an environment service, in memory.

An execution is ``queued`` until one of ``max_concurrency`` slots is free, then
``running``, then ``completed`` (with its rollout) or ``failed`` (with a readable error).
At most ``max_concurrency + max_queue`` executions are unfinished at once (a further
submission is refused: :class:`RegistryFull`). Finished executions are forgotten
``ttl_seconds`` after they finished. The registry lives in the service's process: a
restarted service has forgotten every execution (clients see 404 and may resubmit).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pydantic import ValidationError

from expgit.core.domain import Rollout
from expgit.errors import ExpgitError, NotFoundError
from expgit.remote.protocol import ExecutionState, ExecutionStatus, RolloutRequest

RunRollout = Callable[[RolloutRequest], Awaitable[Rollout]]
_ERROR_CHARS = 2000


class RegistryFull(ExpgitError):
    """Every slot and every queue place is taken; try again later."""


@dataclass
class _Execution:
    id: str
    request: RolloutRequest
    status: ExecutionState = "queued"
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    error: str | None = None
    rollout: Rollout | None = None
    task: asyncio.Task[None] | None = None
    finished_at: float | None = None  # monotonic, for the TTL
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    def view(self) -> ExecutionStatus:
        return ExecutionStatus(execution_id=self.id, status=self.status,
                               case_name=self.request.case.name, created_at=self.created_at,
                               updated_at=self.updated_at, error=self.error,
                               rollout=self.rollout)

    def move(self, status: ExecutionState) -> None:
        self.status = status
        self.updated_at = time.time()
        if status in ("completed", "failed"):
            self.finished_at = time.monotonic()
            self.finished.set()


def _one_line(text: str) -> str:
    return " ".join(text.split())[:_ERROR_CHARS]


class _BadRollout(Exception):
    """The environment returned a rollout that breaks the protocol."""


def _checked(result: object, request: RolloutRequest) -> Rollout:
    """The environment's rollout, validated; raises _BadRollout saying what is wrong."""
    try:
        rollout = result if isinstance(result, Rollout) else Rollout.model_validate(result)
    except ValidationError as exc:
        raise _BadRollout(f"the environment returned an invalid rollout: {exc.errors()[0]}"
                         ) from None
    expected = request.execution_context.policy_snapshot_id
    if rollout.policy_snapshot_id != expected:
        raise _BadRollout(f"the environment returned policy_snapshot_id "
                         f"{rollout.policy_snapshot_id!r}, not the requested {expected!r}")
    if rollout.case.name != request.case.name:
        raise _BadRollout(f"the environment returned a rollout of case {rollout.case.name!r}, "
                         f"not of {request.case.name!r}")
    return rollout


class ExecutionRegistry:
    """Runs ``run(request)`` per submitted execution, bounded (see the module docstring).
    ``execution_timeout`` (seconds, None: none) fails an execution that runs longer."""

    def __init__(self, run: RunRollout, *, max_concurrency: int, max_queue: int,
                 ttl_seconds: float, execution_timeout: float | None = None) -> None:
        self._run = run
        self._slots = asyncio.Semaphore(max_concurrency)
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self.ttl_seconds = ttl_seconds
        self.execution_timeout = execution_timeout
        self._executions: dict[str, _Execution] = {}

    def counts(self) -> dict[str, int]:
        return {"queued": 0, "running": 0, "completed": 0, "failed": 0} | Counter(
            execution.status for execution in self._executions.values())

    def submit(self, request: RolloutRequest) -> ExecutionStatus:
        """Accept ``request``; RegistryFull if every slot and queue place is taken.
        Must be called on the service's event loop."""
        self._sweep()
        counts = self.counts()
        if counts["queued"] + counts["running"] >= self.max_concurrency + self.max_queue:
            raise RegistryFull(f"the service is full: {counts['running']} rollouts running "
                               f"and {counts['queued']} queued; try again later")
        execution = _Execution(id=f"rollout_exec_{uuid.uuid4().hex}", request=request)
        self._executions[execution.id] = execution
        execution.task = asyncio.get_running_loop().create_task(self._execute(execution))
        return execution.view()

    def get(self, execution_id: str) -> ExecutionStatus:
        return self._find(execution_id).view()

    async def wait(self, execution_id: str, seconds: float) -> ExecutionStatus:
        """The status once the execution has finished, or after ``seconds`` (long poll)."""
        execution = self._find(execution_id)
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(execution.finished.wait(), seconds)
        return execution.view()

    def _find(self, execution_id: str) -> _Execution:
        self._sweep()
        execution = self._executions.get(execution_id)
        if execution is None:
            raise NotFoundError(f"no execution {execution_id!r} (unknown, expired after "
                                f"{self.ttl_seconds:g}s, or the service restarted)")
        return execution

    async def _execute(self, execution: _Execution) -> None:
        async with self._slots:
            execution.move("running")
            limit = asyncio.timeout(self.execution_timeout)
            try:
                async with limit:
                    result = await self._run(execution.request)
                execution.rollout = _checked(result, execution.request)
            except asyncio.CancelledError:
                execution.error = "cancelled: the service is shutting down"
                execution.move("failed")
                raise
            except _BadRollout as exc:
                execution.error = _one_line(str(exc))
                execution.move("failed")
            except Exception as exc:  # the environment's failure: reported, not raised
                if isinstance(exc, TimeoutError) and limit.expired():
                    execution.error = (f"the rollout ran over the service's limit of "
                                       f"{self.execution_timeout:g}s")
                else:
                    text = exc.message if isinstance(exc, ExpgitError) else str(exc)
                    execution.error = _one_line(f"{type(exc).__name__}: {text}")
                execution.move("failed")
            else:
                execution.move("completed")

    def _sweep(self) -> None:
        now = time.monotonic()
        expired = [key for key, e in self._executions.items()
                   if e.finished_at is not None and now - e.finished_at > self.ttl_seconds]
        for key in expired:
            del self._executions[key]

    async def close(self) -> None:
        """Cancel every unfinished execution (the service's shutdown)."""
        tasks = [e.task for e in self._executions.values()
                 if e.task is not None and not e.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
