"""Benchmark the remote benchmark protocol's overhead per rollout.

Run by hand (this is not a test)::

    python benchmarks/bench_remote.py [--cases 200] [--work-ms 0 50] [--in-flight 8]
                                      [--poll-initial 0.05] [--poll-max 2.0] [--long-poll 1]
                                      [--thread]

The same toy rollout (tests/remote_toy_env.py: echo the case, after ``--work-ms``
milliseconds of simulated environment work) runs

1. **in-process**: the request is built as RemoteRolloutExecutor builds it and handed to
   the environment's ``run_rollout`` directly, ``--in-flight`` at once;
2. **remote**: RemoteRolloutExecutor against the environment served by the SDK
   (``create_environment_app`` + ``serve_forever``) in a separate process on 127.0.0.1
   (``--thread``: a uvicorn thread of this process instead), service concurrency =
   ``--in-flight``.

Per rollout it reports HTTP round trips (1 submit + polls), the time spent in HTTP calls
(a held long poll counts as HTTP time) and the rollout's wall time, and the ratio of the
two runs' wall times. With ``--long-poll 0`` (plain polling, what a service without the
SDK's ``?wait=`` gets) the polling interval bounds the latency a rollout sees: its first
poll comes ``--poll-initial`` seconds after the submit, then the interval doubles.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from remote_toy_env import SNAPSHOT, ToyEnvironment  # noqa: E402

from expgit.asgi.server import serve_forever, start_server  # noqa: E402
from expgit.core.domain import Case, Rollout  # noqa: E402
from expgit.remote.rollout_executor import RemoteRolloutExecutor  # noqa: E402
from expgit.remote.sdk import create_environment_app  # noqa: E402
from expgit.train.context import ExecutionContext  # noqa: E402

CONTEXT = ExecutionContext("bench-snapshot", metadata={"phase": "bench"})


def serve_main(cases: int, work_ms: float, concurrency: int) -> None:
    """The service process: print the URL once listening, serve until SIGTERM."""
    env = ToyEnvironment({"bench": cases}, delay=work_ms / 1000)
    app = create_environment_app(env, max_concurrency=concurrency, max_queue=cases)
    serve_forever(app, host="127.0.0.1", port=0, on_ready=lambda url: print(url, flush=True))


@contextmanager
def service(cases: int, work_ms: float, concurrency: int, thread: bool) -> Iterator[str]:
    if thread:
        env = ToyEnvironment({"bench": cases}, delay=work_ms / 1000)
        app = create_environment_app(env, max_concurrency=concurrency, max_queue=cases)
        with start_server(app) as server:
            yield server.url
        return
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--cases", str(cases), "--work-ms",
         str(work_ms), "--in-flight", str(concurrency)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def in_process(env: ToyEnvironment, cases: Sequence[Case], in_flight: int,
                     builder: RemoteRolloutExecutor) -> tuple[list[Rollout], list[float]]:
    slots = asyncio.Semaphore(in_flight)
    walls: list[float] = []

    async def one(case: Case) -> Rollout:
        async with slots:
            started = time.perf_counter()
            rollout = await env.run_rollout(builder.request_for(case, SNAPSHOT, CONTEXT))
            walls.append((time.perf_counter() - started) * 1000)
            return rollout

    return list(await asyncio.gather(*(one(c) for c in cases))), walls


def run(args: argparse.Namespace, work_ms: float) -> None:
    env = ToyEnvironment({"bench": args.cases}, delay=work_ms / 1000)
    cases = env.splits["bench"]
    with service(args.cases, work_ms, args.in_flight, args.thread) as url:
        executor = RemoteRolloutExecutor(url, repo_uri="/bench/repo", max_in_flight=args.in_flight,
                                         poll_initial=args.poll_initial, poll_max=args.poll_max,
                                         long_poll=args.long_poll)
        started = time.perf_counter()
        local, local_walls = asyncio.run(in_process(env, cases, args.in_flight, executor))
        local_s = time.perf_counter() - started
        started = time.perf_counter()
        remote = asyncio.run(executor.execute(cases, SNAPSHOT, CONTEXT))
        remote_s = time.perf_counter() - started
    failed = [r.error for r in remote if r.error]
    assert not failed, failed[:3]
    assert [r.case.name for r in remote] == [r.case.name for r in local]
    stats = [r.metadata["remote"] for r in remote]
    trips = [s["round_trips"] for s in stats]
    http_ms = [s["http_ms"] for s in stats]
    walls = [s["wall_ms"] for s in stats]
    per_trip = sum(http_ms) / sum(trips)
    print(f"\nwork {work_ms:g} ms/rollout, {args.cases} cases, {args.in_flight} in flight, "
          f"long poll {args.long_poll:g}s, poll {args.poll_initial:g}..{args.poll_max:g}s, "
          f"service in a {'thread' if args.thread else 'separate process'}")
    print(f"  in-process : {local_s:8.3f}s wall, rollout {statistics.mean(local_walls):8.2f} ms")
    print(f"  remote     : {remote_s:8.3f}s wall, rollout {statistics.mean(walls):8.2f} ms "
          f"(median {statistics.median(walls):.2f})")
    print(f"  round trips per rollout: mean {statistics.mean(trips):.2f}, max {max(trips)} "
          f"(1 submit + polls)")
    print(f"  HTTP time per rollout  : mean {statistics.mean(http_ms):.2f} ms "
          f"({per_trip:.2f} ms per round trip)")
    print(f"  overhead per rollout   : "
          f"{statistics.mean(walls) - statistics.mean(local_walls):.2f} ms wall")
    print(f"  ratio remote / in-process wall: {remote_s / local_s:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--work-ms", type=float, nargs="+", default=[0.0, 50.0])
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--poll-initial", type=float, default=0.05)
    parser.add_argument("--poll-max", type=float, default=2.0)
    parser.add_argument("--long-poll", type=float, default=1.0,
                        help="seconds the service may hold a poll (0: plain polling)")
    parser.add_argument("--thread", action="store_true", help="serve in a thread of this process")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_main(args.cases, args.work_ms[0], args.in_flight)
        return
    for work_ms in args.work_ms:
        run(args, work_ms)


if __name__ == "__main__":
    main()
