"""Time the README's main job, ``bash scripts/run_example.sh``, as a user runs it.

Run by hand (this is not a test; with no endpoint configured it runs the embedded model,
which must be installed)::

    python benchmarks/bench_main_job.py [--runs 1] [--keep DIR]
        [--train-cases FILE --eval-cases FILE]     # e.g. the whole cases/train.yaml

Each run is the script in a fresh temporary folder, started as a new process with this
interpreter's ``expgit`` and ``python3`` first on PATH. Per run it prints the wall time
of the whole script, of its ``expgit train`` (the run report's ``seconds``) and the rest,
the LLM calls and prompt and completion tokens by stage from the run report, and the
calls cut off at the reply limit (``finish_reason=length``); then the median wall time
against the 6-minute target, as a ratio. The load average (``/proc/loadavg``) before and
after each run goes beside it: on a shared machine the wall time is pessimistic, and the
load says by how much. So each run also prints the CPU time of the script's whole
process tree (user + system, the model server included): the embedded model computes on
one thread and the rest of the script waits for it, so on an idle machine the wall time
is about this CPU time. The script's exit code must be 0.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 6 * 60


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def environment(bin_dir: Path, train_cases: Path | None, eval_cases: Path | None
                ) -> dict[str, str]:
    """``expgit`` and ``python3`` are this interpreter (the checkout on PYTHONPATH)."""
    for name, module in (("expgit", "-m expgit"), ("python3", "")):
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" {module} "$@"\n')
        wrapper.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", NO_COLOR="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    if train_cases is not None:
        env["EXPGIT_TRAIN_CASES"] = str(train_cases.resolve())
    if eval_cases is not None:
        env["EXPGIT_EVAL_CASES"] = str(eval_cases.resolve())
    return env


def one_run(number: int, env: dict[str, str], keep: Path | None) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="expgit-main-job."))
    work = folder / "work"
    before = load_average()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "run_example.sh"), str(work)],
                          env=env, capture_output=True, text=True)
    wall = time.monotonic() - began
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    after = load_average()
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime
                                                        - cpu_before.ru_stime)
    (folder / "stdout.txt").write_text(proc.stdout)
    (folder / "stderr.txt").write_text(proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"run {number}: the script exited {proc.returncode}; its output: {folder}")
    report = json.loads((work / "train-report.json").read_text())
    usage = report["usage"]
    cut = sum(f["count"] for f in report.get("failures", [])
              if "finish_reason=length" in f.get("cause", ""))
    result = {"wall": wall, "cpu": cpu, "train": report["seconds"], "load": (before, after),
              "usage": usage, "cut": cut, "failures": report.get("failures", [])}
    if keep is not None:
        shutil.copytree(folder, keep / f"run-{number}", dirs_exist_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
    return result


def show(number: int, run: dict[str, Any]) -> None:
    total = run["usage"]["total"]
    print(f"run {number}: {run['wall']:.1f} s wall (train {run['train']:.1f} s, the rest "
          f"{run['wall'] - run['train']:.1f} s); CPU {run['cpu']:.1f} s; load average "
          f"{run['load'][0]} before, {run['load'][1]} after")
    print(f"  LLM: {total['calls']} calls, {total['prompt_tokens']} prompt + "
          f"{total['completion_tokens']} completion tokens; cut off at the reply limit: "
          f"{run['cut']}")
    for stage, u in run["usage"]["by_stage"].items():
        print(f"    {stage:9} {u['calls']:3} calls  {u['prompt_tokens']:7} prompt  "
              f"{u['completion_tokens']:6} completion")
    for failure in run["failures"]:
        print(f"  failed: {failure['count']} {failure['stage']}: {failure['cause']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="copy each run's folder here")
    parser.add_argument("--train-cases", type=Path)
    parser.add_argument("--eval-cases", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as bin_dir:
        env = environment(Path(bin_dir), args.train_cases, args.eval_cases)
        runs = []
        for number in range(1, args.runs + 1):
            runs.append(one_run(number, env, args.keep))
            show(number, runs[-1])
    for what in ("wall", "cpu"):
        median = statistics.median(r[what] for r in runs)
        print(f"median {what} time: {median:.1f} s over {len(runs)} run(s); "
              f"{median / TARGET_SECONDS:.2f} x the {TARGET_SECONDS // 60}-minute target")


if __name__ == "__main__":
    main()
