"""Prompt size and retrieval time of the bounded context (run by hand; asserts nothing).

    python benchmarks/bench_context.py [--budget 4000] [--queries 200]

Builds in-memory snapshots of 10, 100 and 1,000 synthetic experiences (about 1 KB each,
a vocabulary of a few hundred words, one always-on), and prints the mean estimated
prompt tokens of a rollout (the rendered ``rollout`` system prompt plus the user turn) for
``--queries`` requests; then, at 10,000 experiences, the median and 95th percentile
milliseconds of one :func:`expgit.retrieval.context.select_context` call once the
snapshot's index is built (what a long-lived process pays per request), and the one-off
index build.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import time

from expgit.retrieval.context import select_context
from expgit.store.derived.snapshot import ExperienceEntry, Snapshot
from expgit.store.format.experience import estimate_tokens
from expgit.store.format.templates import render_prompt

WORDS = [f"w{i}" for i in range(400)] + ["refund", "baggage", "cancel", "upgrade", "seat"]


def library(size: int, rng: random.Random) -> Snapshot:
    entries = {}
    for i in range(size):
        name = f"exp-{i:05d}"
        always = "always: true\n" if i == 0 else ""
        body = " ".join(rng.choice(WORDS) for _ in range(170))
        data = (f"---\nname: {name}\nsummary: {' '.join(rng.sample(WORDS, 6))}\n{always}"
                f"---\n{body}\n").encode()
        entries[name] = ExperienceEntry(name, f"experiences/{name}.md",
                                        hashlib.sha1(data).hexdigest(), data, 1, None, 800)
    tree = hashlib.sha1(f"bench-{size}-{rng.random()}".encode()).hexdigest()
    return Snapshot("0" * 40, tree, "experiences", entries, [])


def queries(count: int, rng: random.Random) -> list[str]:
    return [" ".join(rng.sample(WORDS, 8)) for _ in range(count)]


def prompt_tokens(snapshot: Snapshot, query: str, budget: int) -> int:
    selection = select_context(snapshot, query, token_budget=budget)
    system, user = render_prompt("rollout", experiences=selection.items, user_input=query)
    return estimate_tokens(system) + estimate_tokens(user)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(7)
    asked = queries(args.queries, rng)
    print(f"context token budget {args.budget}; {args.queries} requests per size")
    for size in (10, 100, 1000):
        snap = library(size, rng)
        tokens = [prompt_tokens(snap, q, args.budget) for q in asked]
        print(f"{size:>6} experiences: {statistics.mean(tokens):8.0f} prompt tokens per "
              f"rollout (min {min(tokens)}, max {max(tokens)})")
    snap = library(10_000, rng)
    started = time.perf_counter()
    select_context(snap, asked[0], token_budget=args.budget)
    build = (time.perf_counter() - started) * 1000
    times = []
    for q in asked:
        started = time.perf_counter()
        select_context(snap, q, token_budget=args.budget)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    p95 = times[int(len(times) * 0.95) - 1]
    print(f" 10000 experiences: retrieval {statistics.median(times):.2f} ms median, "
          f"{p95:.2f} ms p95 per request (index built once: {build:.0f} ms)")


if __name__ == "__main__":
    main()
