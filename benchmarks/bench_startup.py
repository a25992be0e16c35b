"""Start-up of the command line and the client hook, as whole processes.

Run by hand (this is not a test and asserts nothing about timings)::

    python benchmarks/bench_startup.py [--repeat 15] [--experiences 10000]

Every figure is the median of ``--repeat`` runs of a whole process, beside the floor
measured in the same run: ``python -c "import click, pydantic, git, yaml"`` (the packages
every command needs). Runs of different rows alternate, so all see the same machine load.
The targets:

1. ``expgit --version`` and ``expgit --help``: at most 1.3x the floor;
2. ``git commit`` of a 10-file change with the client pre-commit hook: at most 2x the
   floor plus one plain ``git commit`` (``--no-verify``) of the same change;
3. ``expgit list --json`` on ``--experiences`` experiences (the repository of
   ``bench_core.py``: 300 commits of history): at most 1.0 s, both for ``main`` listed
   again and for a ``main`` that another process just moved by a 5-file commit. The
   first, cold run (no derived data in the git directory yet) is printed too.

``expgit`` is the console script beside this python (``python -m expgit`` if there is
none). The processes run as on a user's machine, where python caches compiled modules
(``__pycache__``): ``PYTHONDONTWRITEBYTECODE`` is removed from their environment, unless
``--no-bytecode-cache`` asks to keep compiling every module on every start. One untimed
run of each command comes first. The repositories live in a temporary folder, removed
at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import bench_core  # beside this script: the 10,000-experience repository builder

FLOOR = [sys.executable, "-c", "import click, pydantic, git, yaml"]
SCRIPT = Path(sys.executable).with_name("expgit")
EXPGIT = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "expgit"]


ENV = {**os.environ, **bench_core.ENV}


def run(argv: Sequence[str | Path], cwd: Path | None = None) -> float:
    started = time.perf_counter()
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=ENV,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed: {proc.stderr.decode()}")
    return elapsed


def medians(rows: dict[str, Callable[[], float]], repeat: int) -> dict[str, float]:
    times: dict[str, list[float]] = {label: [] for label in rows}
    for _ in range(repeat):
        for label, measure in rows.items():
            times[label].append(measure())
    return {label: statistics.median(values) for label, values in times.items()}


def commit_repo(base: Path) -> tuple[Callable[[], float], Callable[[], float]]:
    """A repository with the client hook, and two measures: ``git commit`` of a 10-file
    change with the hook, and the same without it."""
    from expgit.init import init_repository

    repo = base / "client"
    init_repository(repo, seed=seed_folder(base), layout="flat")
    names = sorted(p.stem for p in (repo / "experiences").glob("*.md"))[:10]
    counter = iter(range(1_000_000))

    def change() -> None:
        n = next(counter)
        for name in names:
            path = repo / "experiences" / f"{name}.md"
            path.write_text(path.read_text().rstrip("\n") + f"\nEdit {n}.\n")
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True)

    def with_hook() -> float:
        change()
        return run(["git", "commit", "-q", "-m", "ten edits"], cwd=repo)

    def plain() -> float:
        change()
        return run(["git", "commit", "-q", "--no-verify", "-m", "ten edits"], cwd=repo)

    return with_hook, plain


def seed_folder(base: Path) -> Path:
    """A seed folder of 50 valid experiences (``expgit init --from`` reads it)."""
    seed = base / "seed"
    (seed / "experiences").mkdir(parents=True)
    (seed / "expgit.toml").write_text('experiences_root = "experiences"\ntoken_budget = 800\n')
    rng = random.Random(3)
    for name in bench_core.experience_names(rng, 50):
        (seed / "experiences" / f"{name}.md").write_bytes(
            bench_core.experience_text(rng, name, 1))
    return seed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--experiences", type=int, default=10_000)
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE as it is in this environment")
    args = parser.parse_args()
    if not args.no_bytecode_cache:
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    base = Path(tempfile.mkdtemp(prefix="expgit-bench-startup-"))
    try:
        big = base / "big.git"
        print(f"building {args.experiences} experiences ...", file=sys.stderr)
        bench_core.build_repo(big, args.experiences, 300, random.Random(7))
        listing = [*EXPGIT, "-C", big, "list", "--json"]
        cold = run(listing)
        rng = random.Random(11)
        names = sorted(bench_core.git(big, "ls-tree", "--name-only", "main",
                                      f"{bench_core.ROOT}/").split())

        def after_a_commit() -> float:
            stream = bench_core.FastImport()
            stream.clock += 10_000_000 + rng.randrange(1_000_000)
            tip = bench_core.git(big, "rev-parse", "main").strip()
            stream.commit("refs/heads/main", "five edits\n", {
                path: bench_core.experience_text(rng, Path(path).stem, rng.randrange(10**6))
                for path in rng.sample(names, 5)}, parent=tip)
            stream.run(big)
            return run(listing)

        with_hook, plain = commit_repo(base)
        for warm_up in (FLOOR, [*EXPGIT, "--version"], [*EXPGIT, "--help"]):
            run(warm_up)
        with_hook()
        figures = medians({
            "floor": lambda: run(FLOOR),
            "--version": lambda: run([*EXPGIT, "--version"]),
            "--help": lambda: run([*EXPGIT, "--help"]),
            "commit+hook": with_hook,
            "commit": plain,
            "list": lambda: run(listing),
            "list after a commit": after_a_commit,
        }, args.repeat)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    floor = figures["floor"]
    hook_target = 2 * floor + figures["commit"]
    rows = [
        ("python -c 'import click, pydantic, git, yaml' (floor)", figures["floor"], "-", True),
        ("expgit --version", figures["--version"], f"<= 1.3x floor ({1.3 * floor:.3f} s)",
         figures["--version"] <= 1.3 * floor),
        ("expgit --help", figures["--help"], f"<= 1.3x floor ({1.3 * floor:.3f} s)",
         figures["--help"] <= 1.3 * floor),
        ("git commit, 10 files, pre-commit hook", figures["commit+hook"],
         f"<= 2x floor + plain commit ({hook_target:.3f} s)",
         figures["commit+hook"] <= hook_target),
        ("git commit --no-verify, 10 files", figures["commit"], "-", True),
        (f"expgit list --json, {args.experiences} experiences", figures["list"], "<= 1.000 s",
         figures["list"] <= 1.0),
        ("  the same, main just moved by a 5-file commit", figures["list after a commit"],
         "<= 1.000 s", figures["list after a commit"] <= 1.0),
        ("  the same, first run (no derived data yet)", cold, "-", True),
    ]
    print(f"{'':<52} {'median':>8} {'x floor':>8}  target")
    for label, seconds, target, ok in rows:
        mark = "" if target == "-" else ("  ok" if ok else "  MISSED")
        print(f"{label:<52} {seconds:>7.3f}s {seconds / floor:>7.2f}x  {target}{mark}")
    cache = "off" if "PYTHONDONTWRITEBYTECODE" in ENV else "on"
    print(f"(python {sys.version.split()[0]}, {args.repeat} runs each, interleaved; "
          f"expgit = {' '.join(EXPGIT)}; bytecode cache {cache})")


if __name__ == "__main__":
    main()
