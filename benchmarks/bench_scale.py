"""How expgit's costs grow with history depth and with stored sessions (issue 28).

Run by hand (this is not a test and asserts nothing about timings)::

    python benchmarks/bench_scale.py [--sizes 1000,10000,100000] [--repeat 3]
                                     [--ingest-sizes 1000,10000] [--log-sizes 200,20000]
                                     [--only history|sessions|disk|log]

Every figure is the median of ``--repeat`` whole ``python -m expgit`` processes
(in-process for storing one trajectory), printed for each size with its ratio to the
smallest size: wall seconds, and CPU seconds (user + system of the process and its git
children), which a machine shared with other work disturbs much less than wall time.
Data is generated with ``git fast-import``, so 100,000 commits or sessions take a minute
or two, not hours:

1. **history**: a bare repository of 1,000 experiences and SIZE commits, one edit per
   commit. ``list --json`` the first time (no version cache, as after a clone) before
   and after maintenance; after expgit's maintenance (``git maintenance run --auto``, the
   first commit-graph with changed-path Bloom filters, :mod:`expgit.git.maintenance`):
   ``list --json`` (cache warm), ``propose``, ``log NAME -n 10``, ``show NAME --version
   1``, ``show NAME --version`` (the last); git's own walk alone, for the share of
   the first ``list`` that is git's; and the first ``list`` of a fresh ``git clone``
   that fetched a versions checkpoint (:mod:`expgit.store.derived.version_checkpoint`) half
   its interval behind ``main``.
2. **sessions**: a sessions branch holding SIZE sessions and a trajectories branch holding
   SIZE trajectories, both in the fanned-out layout: ``sessions ingest`` of 100 more,
   ``sessions status --json`` the first time after an ingest of 100 (the kept status
   moved forward by the 100 new manifests), with no derived-data cache at all (as after
   a clone: the branch's status checkpoint moved forward), again (the status kept by
   the manifests folder's tree id) and with ``--all`` (every row), storing one more trajectory.
3. **disk**: ``sessions ingest`` of SIZE real sessions, 100 per process (the
   ``--ingest-sizes``), once with automatic maintenance off (``gc.auto=0``) and once as
   shipped; the git directory's size after each, and after a full ``git gc``.
4. **log**: the history of part 1 at the ``--log-sizes``, with a commit-graph and its
   changed-path Bloom filters (``git commit-graph write --reachable --changed-paths``):
   the whole ``expgit log NAME --json`` with no derived-data cache and again (warm),
   against git's own ``git log --format=%H main -- PATH`` (the floor: the walk the Bloom
   filters make cheap) and the same without the commit-graph; the walk ``log`` adds for
   the layout moves (a ``git log --grep`` of every message); and the start of a
   ``python -m expgit --version`` process, the part of every figure that no history
   changes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from expgit.git import maintenance
from expgit.store.derived import version_checkpoint
from expgit.store.format import trailers as tr
from expgit.store.repository import ExperienceRepository
from expgit.train.records.trajectory_store import TrajectoryStore

ROOT = "experiences"
EXPERIENCES = 1000
IDENT = b"Bench <bench@bench.invalid>"
ENV = {**os.environ, "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@bench.invalid",
       "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@bench.invalid",
       "GIT_CONFIG_NOSYSTEM": "1"}


# ------------------------------------------------------------------ generation
class Stream:
    """A ``git fast-import`` stream written to a temporary file as it is built."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.out = open(path, "wb")  # noqa: SIM115 - closed by run()
        self.clock = 1_700_000_000

    def data(self, payload: bytes) -> None:
        self.out.write(b"data %d\n%s\n" % (len(payload), payload))

    def commit(self, ref: str, message: str, files: dict[str, bytes]) -> None:
        self.clock += 60
        self.out.write(b"commit %s\nauthor %s %d +0000\ncommitter %s %d +0000\n"
                       % (ref.encode(), IDENT, self.clock, IDENT, self.clock))
        self.data(message.encode())
        for path, content in files.items():
            self.out.write(b"M 100644 inline %s\n" % path.encode())
            self.data(content)

    def run(self, git_dir: Path) -> None:
        self.out.close()
        with open(self.path, "rb") as stream:
            subprocess.run(["git", "fast-import", "--quiet"], cwd=git_dir, stdin=stream,
                           check=True, env=ENV)
        self.path.unlink()


def experience(name: str, revision: int) -> bytes:
    return (f"---\nname: {name}\nstatus: active\nsummary: Lesson {name}, revision "
            f"{revision}.\ntags: [bench]\n---\n# {name}\n\nWhen: always.\n\n"
            f"Procedure:\n1. Step {revision}.\n").encode()


def new_bare(path: Path) -> None:
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)],
                   check=True, env=ENV)


def build_history(path: Path, commits: int, rng: random.Random) -> None:
    new_bare(path)
    names = [f"lesson-{i:04d}" for i in range(EXPERIENCES)]
    stream = Stream(path.with_suffix(".stream"))
    files = {"expgit.toml": f'experiences_root = "{ROOT}"\nmain_branch = "main"\n'.encode()}
    files |= {f"{ROOT}/{n}.md": experience(n, 0) for n in names}
    stream.commit("refs/heads/main", "seed\n", files)
    for i in range(1, commits):
        name = rng.choice(names)
        stream.commit("refs/heads/main", f"edit {name}\n",
                      {f"{ROOT}/{name}.md": experience(name, i)})
    stream.run(path)


def hexid(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def session_files(i: int) -> dict[str, bytes]:
    """The records one ingested two-message session leaves, fanned out as expgit lays
    them out (:mod:`expgit.sessions.store`)."""
    key, fp = hexid("session", i), hexid("segment", i)
    question = f"Question {i}: can I bring my pet in the cabin?"
    messages = json.dumps([{"role": "user", "content": question},
                           {"role": "assistant", "content": f"Answer {i}: one pet."}],
                          indent=1).encode() + b"\n"
    manifest = {
        "version": 1, "session_key": key, "source_hash": key, "session_id_hash": None,
        "agent": "bot", "format": "openai", "message_count": 2, "content_hash": fp,
        "status": "segmented", "status_reason": None, "resume_from": None,
        "invalid_lines": 0, "redactions": {}, "signals": None,
        "segments": [{"start": 0, "end": 2, "fingerprint": fp, "topic": question,
                      "status": "active", "metrics": None, "feedback": None,
                      "memory_eligible": False, "sft_eligible": False, "trained": False,
                      "trajectory_uri": None, "gradient_ids": [], "proposal_ids": [],
                      "last_error": None, "invalidation": None}]}
    return {f"sessions/{key[:2]}/{key}.json": json.dumps(manifest, indent=1).encode() + b"\n",
            f"transcripts/{key[:2]}/{key}.json": messages,
            f"segments/{fp[:2]}/{fp}.json": messages}


def build_records(path: Path, count: int) -> None:
    """A repository with ``count`` sessions and ``count`` trajectories on their branches
    (1,000 records per commit)."""
    subprocess.run([sys.executable, "-m", "expgit", "init", "--bare", str(path)],
                   check=True, env=ENV, capture_output=True)
    stream = Stream(path.with_suffix(".stream"))
    for start in range(0, count, 1000):
        sessions: dict[str, bytes] = {}
        trajectories: dict[str, bytes] = {}
        for i in range(start, min(count, start + 1000)):
            sessions |= session_files(i)
            tid = hexid("trajectory", i)
            trajectories[f"trajectories/{tid[:2]}/{tid}.md"] = \
                f"---\noutcome: success\n---\n# trajectory {i}\n".encode()
        stream.commit("refs/heads/expgit/sessions", f"sessions {start}\n", sessions)
        stream.commit("refs/heads/expgit/trajectories", f"trajectories {start}\n",
                      trajectories)
    stream.run(path)


def write_sessions(folder: Path, start: int, count: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(start, start + count):
        path = folder / f"s{i:06d}.jsonl"
        path.write_text(
            json.dumps({"role": "user", "content": f"New question {i}: may I change seat?"})
            + "\n" + json.dumps({"role": "assistant", "content": f"Reply {i}: yes."}) + "\n")
        files.append(path)
    return files


# ---------------------------------------------------------------------- timing
def expgit(repo: Path, *args: str | Path) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run([sys.executable, "-m", "expgit", "-C", str(repo), *map(str, args)],
                          capture_output=True, env=ENV)
    if proc.returncode != 0:
        sys.exit(f"expgit {' '.join(map(str, args))} failed: {proc.stderr.decode()}")
    return proc


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), \
        resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def median_s(repeat: int, run: Callable[[], object],
             setup: Callable[[], object] | None = None) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds) of ``run``."""
    walls, cpus = [], []
    for _ in range(repeat):
        if setup is not None:
            setup()
        start, cpu = time.perf_counter(), _cpu()
        run()
        walls.append(time.perf_counter() - start)
        cpus.append(_cpu() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def du(path: Path) -> int:
    """Bytes on disk, as ``du`` counts them (a loose object takes a whole block)."""
    return sum(f.lstat().st_blocks * 512 for f in path.rglob("*"))


def drop_cache(git_dir: Path) -> None:
    shutil.rmtree(git_dir / "expgit" / "cache", ignore_errors=True)


def target(git_dir: Path) -> maintenance.Target:
    return maintenance.Target(git_dir, git_dir / "objects",
                              lambda: {**ENV, "GIT_DIR": str(git_dir)})


Figures = dict[str, tuple[float, float]]  # label: (wall, cpu); sizes: (value, value)


def history_figures(work: Path, size: int, repeat: int) -> Figures:
    repo = work / f"history-{size}.git"
    build_history(repo, size, random.Random(size))
    name, new = "lesson-0007", work / "new.md"
    new.write_bytes(experience(name, 10 ** 9))
    got: Figures = {}
    got["list, first (no cache, no commit-graph)"] = median_s(
        repeat, lambda: expgit(repo, "list", "--json"), lambda: drop_cache(repo))
    failures: list[str | None] = []
    got["maintenance (commit-graph + Bloom filters), once"] = median_s(1, lambda: failures.append(
        maintenance.maintain(target(repo))))
    if failures[0]:
        sys.exit(failures[0])
    got["list, first (no cache) once maintained"] = median_s(
        repeat, lambda: expgit(repo, "list", "--json"), lambda: drop_cache(repo))
    got["  of which git's walk alone (git log --name-only)"] = median_s(
        repeat, lambda: subprocess.run(
            ["git", "log", "-z", "--format=%x01%H", "--name-only", "--no-renames", "main",
             "--", f"{ROOT}/"], cwd=repo, check=True, capture_output=True, env=ENV))
    got["list (cache warm)"] = median_s(repeat, lambda: expgit(repo, "list", "--json"))
    got["propose"] = median_s(repeat, lambda: expgit(
        repo, "propose", name, "--content-file", new, "--rationale", "bench", "--json"))
    got["log NAME -n 10"] = median_s(repeat, lambda: expgit(repo, "log", name, "-n", "10",
                                                            "--json"))
    got["show NAME --version 1"] = median_s(repeat, lambda: expgit(
        repo, "show", name, "--version", "1"))
    versions = json.loads(expgit(repo, "show", name, "--json").stdout)["version"]
    got["show NAME --version LAST"] = median_s(repeat, lambda: expgit(
        repo, "show", name, "--version", str(versions)))
    # the checkpoint `expgit apply` writes every EVERY commits, here as it stands half
    # way to the next one; then a clone's first list (no derived cache) starts from it
    opened = ExperienceRepository.open(repo)
    back = opened.git.out("rev-parse", f"main~{version_checkpoint.EVERY // 2}").strip()
    version_checkpoint.write(opened.git, ROOT, back, {
        p: (v.version, v.last_commit, v.first_commit)
        for p, v in opened.snapshots.versions(back).items()})
    clone = work / "clone.git"

    def fresh_clone() -> None:
        shutil.rmtree(clone, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(clone)], check=True,
                       env=ENV)

    got[f"list, first after a clone (checkpoint {version_checkpoint.EVERY // 2} back)"] = \
        median_s(repeat, lambda: expgit(clone, "list", "--json"), fresh_clone)
    shutil.rmtree(clone, ignore_errors=True)
    shutil.rmtree(repo)
    return got


def session_figures(work: Path, size: int, repeat: int) -> Figures:
    repo = work / f"records-{size}.git"
    build_records(repo, size)
    got: Figures = {}
    batches = iter(range(10 ** 6, 10 ** 7, 100))

    def ingest() -> None:
        files = write_sessions(work / "incoming", next(batches), 100)
        expgit(repo, "sessions", "ingest", *files, "--agent", "bot", "--json")
        for f in files:
            f.unlink()

    # untimed: the first ingest of a repository written by fast-import counts its
    # sessions once for the status checkpoint (expgit.sessions.status.checkpoint)
    ingest()
    got["sessions ingest of 100 more"] = median_s(repeat, ingest)
    caches = repo / "expgit" / "cache"
    expgit(repo, "sessions", "status", "--json")  # the kept status, as a hub that runs it has
    got["sessions status --json, first after an ingest of 100"] = median_s(
        repeat, lambda: expgit(repo, "sessions", "status", "--json"), ingest)
    got["sessions status --json, no cache (as after a clone)"] = median_s(
        repeat, lambda: expgit(repo, "sessions", "status", "--json"),
        lambda: [f.unlink() for f in caches.glob("index.sqlite3*")])
    got["sessions status --json (folder unchanged)"] = median_s(
        repeat, lambda: expgit(repo, "sessions", "status", "--json"))
    got["sessions status --json --all"] = median_s(
        repeat, lambda: expgit(repo, "sessions", "status", "--json", "--all"))
    store = TrajectoryStore(ExperienceRepository.open(repo))
    counter = iter(range(10 ** 6))

    def one_trajectory() -> None:
        i = next(counter)
        uri, created = store.store(hexid("more", i), f"# more {i}\n", f"trajectory {i}")
        assert created, uri

    got["store one more trajectory (in-process)"] = median_s(max(repeat, 5), one_trajectory)
    shutil.rmtree(repo)
    return got


def disk_figures(work: Path, size: int) -> Figures:
    got: Figures = {}
    for label, config in (("gc.auto=0 (unmaintained)", "0"), ("as shipped", None)):
        repo = work / f"disk-{size}-{config}.git"
        subprocess.run([sys.executable, "-m", "expgit", "init", "--bare", str(repo)],
                       check=True, env=ENV, capture_output=True)
        if config is not None:
            subprocess.run(["git", "config", "gc.auto", config], cwd=repo, check=True)
        for start in range(0, size, 100):
            files = write_sessions(work / "disk-incoming", start, min(100, size - start))
            expgit(repo, "sessions", "ingest", *files, "--agent", "bot", "--json")
            for f in files:
                f.unlink()
        deadline = time.monotonic() + 600
        while (repo / "gc.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.5)  # a detached git gc finishing (it removes gc.pid at its end)
        before = du(repo) / 2 ** 20
        subprocess.run(["git", "gc", "-q"], cwd=repo, check=True, env=ENV)
        after = du(repo) / 2 ** 20
        got[f"git dir MiB, {label}"] = (before, before)
        got[f"git dir MiB after full git gc, {label}"] = (after, after)
        got[f"size / size after full gc, {label}"] = (before / after, before / after)
        shutil.rmtree(repo)
    return got


def log_figures(work: Path, size: int, repeat: int) -> Figures:
    repo = work / f"log-{size}.git"
    build_history(repo, size, random.Random(size))
    name = "lesson-0007"
    path = f"{ROOT}/{name}.md"

    def git_log(*config: str) -> None:
        subprocess.run(["git", *config, "log", "--format=%H", "main", "--", path], cwd=repo,
                       check=True, capture_output=True, env=ENV)

    got: Figures = {}
    got["git log --format=%H -- PATH, no commit-graph"] = median_s(
        repeat, lambda: git_log("-c", "core.commitGraph=false"))
    subprocess.run(["git", "commit-graph", "write", "--reachable", "--changed-paths"],
                   cwd=repo, check=True, capture_output=True, env=ENV)
    got["git log --format=%H -- PATH (Bloom filters)"] = median_s(repeat, git_log)
    got["expgit log NAME --json, no cache"] = median_s(
        repeat, lambda: expgit(repo, "log", name, "--json"), lambda: drop_cache(repo))
    # the walk expgit adds: the layout moves of the whole history (store.moves.moves_in),
    # a --grep of every commit message, which no Bloom filter shortens
    got["  of which the moves' walk (git log --grep)"] = median_s(repeat, lambda: subprocess.run(
        ["git", "log", "-z", "--format=%H%n%B", "-i", f"--grep=^{tr.MIGRATED_FROM}:", "main",
         "--"], cwd=repo, check=True, capture_output=True, env=ENV))
    got["expgit log NAME --json (cache warm)"] = median_s(
        repeat, lambda: expgit(repo, "log", name, "--json"))
    got["expgit --version (process start)"] = median_s(
        repeat, lambda: expgit(repo, "--version"))
    shutil.rmtree(repo)
    return got


# --------------------------------------------------------------------- report
def report(title: str, sizes: Sequence[int], rows: dict[int, Figures], *,
           cpu: bool = True) -> None:
    print(f"\n## {title}")
    columns = [f"{s:,}" for s in sizes] + [f"{s:,}/{sizes[0]:,}" for s in sizes[1:]]
    print("| figure | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for label in rows[sizes[0]]:
        for which, kind in ((0, "wall s"), (1, "CPU s")) if cpu else ((0, ""),):
            values = [rows[s][label][which] for s in sizes]
            ratios = [f"{v / values[0]:.2f}x" if values[0] else "-" for v in values[1:]]
            cells = [f"{v:.3f}" for v in values] + ratios
            print(f"| {label}{f' ({kind})' if kind else ''} | " + " | ".join(cells) + " |")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--ingest-sizes", default="1000,10000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--log-sizes", default="200,20000")
    parser.add_argument("--only", choices=("history", "sessions", "disk", "log"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        work = Path(tmp)
        if args.only in (None, "history"):
            report("history depth: 1,000 experiences, SIZE commits", sizes,
                   {s: history_figures(work, s, args.repeat) for s in sizes})
        if args.only in (None, "sessions"):
            report("records: SIZE sessions and SIZE trajectories stored", sizes,
                   {s: session_figures(work, s, args.repeat) for s in sizes})
        if args.only in (None, "disk"):
            ingest_sizes = [int(s) for s in args.ingest_sizes.split(",")]
            report("disk: SIZE sessions ingested, 100 per process", ingest_sizes,
                   {s: disk_figures(work, s) for s in ingest_sizes}, cpu=False)
        if args.only in (None, "log"):
            log_sizes = [int(s) for s in args.log_sizes.split(",")]
            report("log: expgit log NAME against git log -- PATH, SIZE commits", log_sizes,
                   {s: log_figures(work, s, args.repeat) for s in log_sizes})


if __name__ == "__main__":
    main()
