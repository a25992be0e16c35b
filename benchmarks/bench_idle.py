"""How the machine's idle time changes the cost of one git write (run by hand).

A streaming run with a slow LLM is mostly idle: its git work comes in short bursts after
tens of milliseconds of nothing. On some machines (virtual ones especially) the first
file-system work after an idle gap costs many times what the same work costs in a tight
loop. This script writes blobs one at a time after a sleep of ``--gaps`` milliseconds,
through expgit (``GitRepo.write_blob``, in process) and through raw git (``git
hash-object -w``, one process each), and prints the median cost per write and the ratio::

    python benchmarks/bench_idle.py [--writes 200] [--gaps 0,1,3,10,50] [--dir PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from expgit.git.repo import GitRepo  # noqa: E402


def file_creation_cost(folder: Path, files: int = 200) -> float:
    """Median seconds to create an empty file in a new subfolder of ``folder`` (left
    there: deleting them would add to what is measured)."""
    probe = folder / "file-creation-probe"
    probe.mkdir()
    times = []
    for i in range(files):
        started = time.perf_counter()
        os.close(os.open(probe / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        times.append(time.perf_counter() - started)
    return sorted(times)[files // 2]


def median_after_gap(write: Callable[[int], object], writes: int, gap: float) -> float:
    """Median seconds of ``write(i)``, each after ``gap`` seconds of sleep."""
    times = []
    for i in range(writes):
        time.sleep(gap)
        start = time.perf_counter()
        write(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--gaps", default="0,1,3,10,50", metavar="MS,MS,...")
    parser.add_argument("--dir", default=None, metavar="PATH",
                        help="make the repository in PATH (default: the temporary folder)")
    args = parser.parse_args()
    gaps = [float(g) / 1000 for g in args.gaps.split(",")]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "idle.git"
        repo = GitRepo.init(path, bare=True, branch="main")

        def expgit_write(i: int) -> object:
            return repo.write_blob(b"expgit blob %d %f\n" % (i, time.time()))

        def raw_write(i: int) -> object:
            return subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=path,
                                  input=b"raw blob %d %f\n" % (i, time.time()),
                                  capture_output=True, check=True)

        print(f"creating an empty file in {tmp}: {file_creation_cost(Path(tmp)) * 1e6:.0f} us "
              "(median of 200; see bench_train.py on recently deleted inodes)")
        print(f"one blob write after an idle gap ({args.writes} writes each, median; "
              f"repository in {tmp})")
        print(f"{'gap ms':>7} {'expgit ms':>10} {'raw git ms':>11} {'ratio':>7}")
        for gap in gaps:
            mine = median_after_gap(expgit_write, args.writes, gap)
            raw = median_after_gap(raw_write, args.writes, gap)
            print(f"{gap * 1000:>7.0f} {mine * 1000:>10.3f} {raw * 1000:>11.3f} "
                  f"{mine / raw:>6.2f}x")
        repo.close()


if __name__ == "__main__":
    main()
