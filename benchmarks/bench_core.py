"""Benchmark expgit's core paths against the raw git plumbing doing the same work.

Run by hand (this is not a test and asserts nothing about timings)::

    python benchmarks/bench_core.py [--experiences 10000] [--repeat 5] [--commits 300]

It builds a bare experience repository with ``git fast-import`` (N experiences of about
1 KB with valid front matter, then a few hundred commits touching random files, so the
per-file version pass has real history to walk), and measures, each as the median of
``--repeat`` runs, expgit used in-process (as a library user or a long-lived server would)
beside the raw ``git`` commands, driven from Python ``subprocess`` with output read fully:

1. snapshot load, cold (a fresh repository object and snapshot loader) vs ``ls-tree`` +
   ``cat-file --batch --buffer`` of every blob + ``log --name-only -- experiences/``;
2. snapshot reload after another process committed a 5-file change to ``main`` (warm
   loader) vs ``ls-tree`` + ``cat-file`` of the 5 new blobs + ``log OLD..NEW``;
3. gradient commit (``expgit.store.workflow.gradients.propose``) vs ``hash-object -w`` + ``mktree``
   (the 10k-entry experiences subtree, then the root) + ``commit-tree`` + ``update-ref``;
4. proposal commit (``expgit.store.workflow.proposals.merge`` of 5 gradients) vs the same plumbing
   writing 5 blobs;
5. apply (``expgit.store.workflow.apply.apply_proposal``, a fast-forward) vs one ``update-ref``.

Fairness: the raw side gets the tree listings it edits for free (read once, before
timing), as a caller that keeps them around would; the expgit side starts each timed run
with whatever its caches hold after the previous operations, as in a long-lived process.
expgit and raw runs alternate, so both see the same machine load. The repository is bare,
so ``apply`` has no working tree to update (that is a different cost). The wall time of
one ``python -m expgit list --json`` process is printed separately, for information: it
is dominated by interpreter start-up, imports and front matter parsing, not by git.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = "experiences"
ENV = {
    "GIT_AUTHOR_NAME": "Bench Author", "GIT_AUTHOR_EMAIL": "author@bench.invalid",
    "GIT_COMMITTER_NAME": "Bench Committer", "GIT_COMMITTER_EMAIL": "committer@bench.invalid",
}
_VOCABULARY = (
    "agent user booking flight refund payment policy cabin baggage certificate reservation "
    "passenger change cancel confirm verify identity profile membership gold silver regular "
    "economy basic business insurance segment itinerary fare difference original method card "
    "gift travel compensation delay transfer human tool call write action always never check "
    "before after rule step quote amount exact total available seat origin destination date"
)
WORDS = _VOCABULARY.split()
AREAS = ("refund", "booking", "baggage", "identity", "payment", "cabin", "cancel", "transfer",
         "loyalty", "itinerary", "compensation", "seating")


# ------------------------------------------------------------------------- data
def sentence(rng: random.Random, lo: int, hi: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
    return " ".join(words).capitalize() + "."


def experience_text(rng: random.Random, name: str, revision: int) -> bytes:
    """About 1 KB of a realistic experience file with valid front matter."""
    tags = ", ".join(sorted({rng.choice(WORDS) for _ in range(3)}))
    lines = [
        "---", f"name: {name}", f"status: {rng.choice(['active', 'active', 'draft'])}",
        f"summary: {sentence(rng, 8, 16)}", f"tags: [{tags}]", "metadata:",
        "  owner: bench", f"  revision: {revision}", "---",
        f"# {name.replace('-', ' ').capitalize()}", "", f"When: {sentence(rng, 8, 14)}", "",
        "Procedure:",
        *(f"{i}. {sentence(rng, 10, 18)}" for i in range(1, rng.randint(4, 6))),
        "", "Pitfalls:", *(f"- {sentence(rng, 8, 14)}" for _ in range(rng.randint(2, 4))),
    ]
    return ("\n".join(lines) + "\n").encode()


def experience_names(rng: random.Random, count: int) -> list[str]:
    return [f"{rng.choice(AREAS)}-{rng.choice(WORDS)}-{i:05d}" for i in range(count)]


class FastImport:
    """Writes a ``git fast-import`` stream: one commit per :meth:`commit` call."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.clock = 1_700_000_000

    def data(self, payload: bytes) -> None:
        self.parts += [f"data {len(payload)}\n".encode(), payload, b"\n"]

    def commit(self, ref: str, message: str, files: dict[str, bytes | None],
               parent: str | None = None) -> None:
        self.clock += 60
        self.parts.append(f"commit {ref}\n".encode())
        for who in ("author", "committer"):
            key = who.upper()
            self.parts.append(f"{who} {ENV[f'GIT_{key}_NAME']} <{ENV[f'GIT_{key}_EMAIL']}> "
                              f"{self.clock} +0000\n".encode())
        self.data(message.encode())
        if parent:
            self.parts.append(f"from {parent}\n".encode())
        for path, content in files.items():
            if content is None:
                self.parts.append(f"D {path}\n".encode())
            else:
                self.parts.append(f"M 100644 inline {path}\n".encode())
                self.data(content)

    def run(self, git_dir: Path) -> None:
        git(git_dir, "fast-import", "--quiet", input=b"".join(self.parts))
        self.parts = []


def git(git_dir: Path, *args: str, input: bytes | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=git_dir, input=input, capture_output=True)
    if proc.returncode != 0:
        sys.exit(f"git {' '.join(args)} failed: {proc.stderr.decode()}")
    return proc.stdout.decode()


def build_repo(path: Path, count: int, commits: int, rng: random.Random) -> list[str]:
    """A bare repository with ``count`` experiences and ``commits`` commits of history."""
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)],
                   check=True)
    names = experience_names(rng, count)
    stream = FastImport()
    settings = (f'experiences_root = "{ROOT}"\nmain_branch = "main"\n'
                "token_budget = 800\n").encode()
    files: dict[str, bytes | None] = {"expgit.toml": settings}
    files |= {f"{ROOT}/{n}.md": experience_text(rng, n, 1) for n in names}
    stream.commit("refs/heads/main", f"seed {count} experiences\n", files)
    revision = 1
    for i in range(commits):
        revision += 1
        touched = rng.sample(names, rng.randint(1, 40))
        change: dict[str, bytes | None] = {
            f"{ROOT}/{n}.md": experience_text(rng, n, revision) for n in touched}
        if i % 10 == 9:  # now and then one experience is retired and a new one added
            gone = rng.choice([n for n in names if n not in touched])
            names.remove(gone)
            change[f"{ROOT}/{gone}.md"] = None
            new = f"{rng.choice(AREAS)}-new-{count + i:05d}"
            names.append(new)
            change[f"{ROOT}/{new}.md"] = experience_text(rng, new, revision)
        stream.commit("refs/heads/main", f"history commit {i}\n", change)
    stream.run(path)
    return names


# --------------------------------------------------------------------- timing
@dataclass
class Row:
    label: str
    expgit_ms: float
    raw_ms: float
    target: str  # "<= 1.3x raw" (a ratio) or "<= 50 ms" (absolute, expgit alone)

    @property
    def ratio(self) -> float:
        return self.expgit_ms / self.raw_ms

    @property
    def ok(self) -> bool:
        limit = self.target.split()[1]
        if self.target.endswith(" ms"):
            return self.expgit_ms <= float(limit)
        return self.ratio <= float(limit.rstrip("x"))


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def compare(repeat: int, expgit: Callable[[], object], raw: Callable[[], object],
            expgit_setup: Callable[[], object] | None = None,
            raw_setup: Callable[[], object] | None = None) -> tuple[float, float]:
    """Median ms of each side; the runs alternate (expgit, raw, raw, expgit, ...) so that
    both see the same machine load."""
    times: dict[str, list[float]] = {"expgit": [], "raw": []}
    sides = [("expgit", expgit_setup, expgit), ("raw", raw_setup, raw)]
    for i in range(repeat):
        for side, setup, fn in sides if i % 2 == 0 else sides[::-1]:
            if setup is not None:
                setup()
            times[side].append(timed(fn))
    return statistics.median(times["expgit"]), statistics.median(times["raw"])


def sh(git_dir: Path, *args: str, input: bytes | None = None) -> bytes:
    """A raw git command from Python, output read fully (the baseline's building block)."""
    proc = subprocess.run(["git", *args], cwd=git_dir, input=input, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed: {proc.stderr.decode()}")
    return proc.stdout


def parse_ls_tree(text: bytes) -> dict[bytes, bytes]:
    """``{name: line}`` of a ``git ls-tree -z`` listing."""
    return {line.split(b"\t", 1)[1]: line for line in text.split(b"\0") if line}


def ls_tree_blobs(listing: dict[bytes, bytes]) -> list[bytes]:
    return [line.split(b" ", 2)[2][:40] for line in listing.values()]


# ------------------------------------------------------------------- benchmark
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiences", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--commits", type=int, default=300, help="history commits")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the generated repository")
    args = parser.parse_args()
    os.environ.update(ENV)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="expgit-bench-"))
    repo_dir = work / "bench.git"
    try:
        started = time.perf_counter()
        names = build_repo(repo_dir, args.experiences, args.commits, rng)
        print(f"built {repo_dir}: {len(names)} experiences, {args.commits + 1} commits in "
              f"{time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        rows, info = run_benchmarks(repo_dir, names, args.repeat, rng)
        info |= cli_startup(repo_dir, args.repeat)
    finally:
        if args.keep:
            print(f"kept {repo_dir}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(rows, info, args)


def run_benchmarks(repo_dir: Path, names: list[str], repeat: int,
                   rng: random.Random) -> tuple[list[Row], dict[str, float]]:
    from expgit.store.derived.snapshot import SnapshotLoader
    from expgit.store.repository import ExperienceRepository
    from expgit.store.workflow.apply import apply_proposal
    from expgit.store.workflow.gradients import GradientRequest, propose
    from expgit.store.workflow.proposals import merge

    rows: list[Row] = []
    revision = 10_000
    state: dict[str, Any] = {}

    def new_text(name: str) -> str:
        nonlocal revision
        revision += 1
        return experience_text(rng, name, revision).decode()

    def progress(label: str) -> None:
        print(f"  measuring {label} ...", file=sys.stderr, flush=True)

    # 1. cold snapshot load -----------------------------------------------------------
    def fresh_repo() -> None:
        if "repo" in state:
            state["repo"].git.close()
        SnapshotLoader._instances.clear()  # a fresh process-level loader
        state["repo"] = ExperienceRepository.open(repo_dir)

    def cold_load() -> None:
        assert len(state["repo"].snapshot().entries) == len(names)

    def raw_snapshot() -> None:
        listing = parse_ls_tree(sh(repo_dir, "ls-tree", "-z", f"main:{ROOT}"))
        shas = ls_tree_blobs(listing)
        blobs = sh(repo_dir, "cat-file", "--batch", "--buffer", input=b"\n".join(shas) + b"\n")
        log = sh(repo_dir, "log", "--format=%x01%H", "--name-only", "--no-renames", "main",
                 "--", f"{ROOT}/")
        assert len(shas) == len(names) and blobs and log

    progress("snapshot load, cold")
    rows.append(Row("snapshot load, cold",
                    *compare(repeat, cold_load, raw_snapshot, expgit_setup=fresh_repo),
                    "<= 1.3x raw"))
    repo: ExperienceRepository = state["repo"]

    # 2. reload after another process committed a 5-file change to main ----------------
    def commit_elsewhere() -> None:
        """Another process (git fast-import) moves main by a commit changing 5 files."""
        old = git(repo_dir, "rev-parse", "main").strip()
        stream = FastImport()
        stream.clock = int(time.time())
        stream.commit("refs/heads/main", "five-file change\n",
                      {f"{ROOT}/{n}.md": new_text(n).encode() for n in rng.sample(names, 5)},
                      parent=old)
        stream.run(repo_dir)
        state["old"] = old

    def reload_setup() -> None:
        repo.snapshot()  # warm at the current main
        commit_elsewhere()

    def warm_reload() -> None:
        assert repo.snapshot().commit != state["old"]

    def raw_reload_setup() -> None:
        # the raw side keeps the previous listing, as the warm loader keeps its caches
        state["before"] = parse_ls_tree(sh(repo_dir, "ls-tree", "-z", f"main:{ROOT}"))
        commit_elsewhere()

    def raw_reload() -> None:
        listing = parse_ls_tree(sh(repo_dir, "ls-tree", "-z", f"main:{ROOT}"))
        before = state["before"]
        shas = [line.split(b" ", 2)[2][:40] for name, line in listing.items()
                if before.get(name) != line]
        blobs = sh(repo_dir, "cat-file", "--batch", "--buffer", input=b"\n".join(shas) + b"\n")
        log = sh(repo_dir, "log", "--format=%x01%H", "--name-only", "--no-renames", "main",
                 f"^{state['old']}", "--", f"{ROOT}/")
        assert len(shas) == 5 and blobs and log

    progress("snapshot reload")
    rows.append(Row("snapshot reload after 5-file change",
                    *compare(repeat, warm_reload, raw_reload, reload_setup, raw_reload_setup),
                    "<= 50 ms"))
    repo.snapshot()

    # 3. gradient commit ------------------------------------------------------------------
    main_sha = git(repo_dir, "rev-parse", "main").strip()
    sub_listing = parse_ls_tree(sh(repo_dir, "ls-tree", "-z", f"{main_sha}:{ROOT}"))
    root_listing = parse_ls_tree(sh(repo_dir, "ls-tree", "-z", main_sha))
    counter = iter(range(1_000_000))

    def raw_commit(contents: dict[str, bytes], ref: str) -> None:
        """hash-object -w, mktree (experiences, then root), commit-tree, update-ref."""
        if len(contents) == 1:
            shas = [sh(repo_dir, "hash-object", "-w", "--stdin",
                       input=next(iter(contents.values()))).strip()]
        else:
            files = []
            for i, data in enumerate(contents.values()):
                path = repo_dir.parent / f"blob{i}"
                path.write_bytes(data)
                files.append(str(path))
            shas = sh(repo_dir, "hash-object", "-w", *files).split()
        sub = dict(sub_listing)
        for name, sha in zip(contents, shas, strict=True):
            key = f"{name}.md".encode()
            sub[key] = b"100644 blob " + sha + b"\t" + key
        sub_tree = sh(repo_dir, "mktree", "-z", input=b"\0".join(sub.values()) + b"\0")
        top = dict(root_listing)
        top[ROOT.encode()] = b"040000 tree " + sub_tree.strip() + b"\t" + ROOT.encode()
        tree = sh(repo_dir, "mktree", "-z", input=b"\0".join(top.values()) + b"\0").strip()
        commit = sh(repo_dir, "commit-tree", "-p", main_sha, "-m", "raw benchmark commit",
                    tree.decode()).strip()
        sh(repo_dir, "update-ref", ref, commit.decode(), "0" * 40)

    def gradient_setup() -> None:
        name = rng.choice(names)
        state["request"] = GradientRequest(name=name, content=new_text(name),
                                           rationale="benchmark edit", evidence=["bench"],
                                           confidence=0.7)

    def expgit_gradient() -> None:
        propose(repo, state["request"])

    def raw_gradient_setup() -> None:
        name = rng.choice(names)
        state["raw"] = {name: new_text(name).encode()}

    def raw_gradient() -> None:
        raw_commit(state["raw"], f"refs/heads/raw/g{next(counter)}")

    progress("gradient commit")
    rows.append(Row("gradient commit (propose)",
                    *compare(repeat, expgit_gradient, raw_gradient, gradient_setup,
                             raw_gradient_setup), "<= 1.3x raw"))

    # 4. proposal commit: merge 5 gradients -------------------------------------------------
    def merge_setup() -> None:
        state["ids"] = [propose(repo, GradientRequest(
            name=name, content=new_text(name), rationale=f"improve {name}",
            evidence=["bench"], confidence=0.6)).id for name in rng.sample(names, 5)]

    def expgit_merge() -> None:
        state["proposal"] = merge(repo, state["ids"])

    def raw_merge_setup() -> None:
        state["raw5"] = {n: new_text(n).encode() for n in rng.sample(names, 5)}

    def raw_merge() -> None:
        raw_commit(state["raw5"], f"refs/heads/raw/p{next(counter)}")

    progress("proposal commit")
    rows.append(Row("proposal commit (merge 5 gradients)",
                    *compare(repeat, expgit_merge, raw_merge, merge_setup, raw_merge_setup),
                    "<= 1.3x raw"))

    # 5. apply (fast-forward) ----------------------------------------------------------------
    def apply_setup() -> None:
        merge_setup()
        expgit_merge()

    def expgit_apply() -> None:
        assert not apply_proposal(repo, state["proposal"].id).rebased

    chain = [main_sha]
    for i in range(repeat + 1):
        tree = git(repo_dir, "rev-parse", f"{chain[-1]}^{{tree}}").strip()
        chain.append(git(repo_dir, "commit-tree", "-p", chain[-1], "-m", f"ff {i}",
                         tree).strip())
    git(repo_dir, "update-ref", "refs/heads/raw/main", main_sha)
    steps = iter(itertools.pairwise(chain))

    def raw_apply() -> None:
        old, new = next(steps)
        sh(repo_dir, "update-ref", "-m", "raw apply", "refs/heads/raw/main", new, old)

    progress("apply")
    rows.append(Row("apply (fast-forward)",
                    *compare(repeat, expgit_apply, raw_apply, apply_setup), "<= 2x raw"))

    # what apply cannot avoid beyond one update-ref, for information
    scratch = [f"refs/heads/raw/closing/{i}" for i in range(12)]

    def transaction_setup() -> None:
        head = git(repo_dir, "rev-parse", "main").strip()
        lines = [f"update {ref} {head}" for ref in scratch[:6]]
        lines += [f"delete {ref}" for ref in scratch[6:]]
        git(repo_dir, "update-ref", "--stdin", input=("\n".join(lines) + "\n").encode())
        state["transaction"] = head

    def raw_transaction() -> None:
        """main moved and 6 refs renamed in one transaction: apply's ref update for a
        proposal of 5 gradients (the proposal and each gradient move to applied)."""
        head = state["transaction"]
        lines = [f"update refs/heads/raw/main {head}"]
        lines += [f"delete {ref} {head}" for ref in scratch[:6]]
        lines += [f"update {ref} {head} {'0' * 40}" for ref in scratch[6:]]
        sh(repo_dir, "update-ref", "-m", "raw apply", "--stdin",
           input=("\n".join(lines) + "\n").encode())

    def raw_worktrees() -> None:
        sh(repo_dir, "worktree", "list", "--porcelain")

    def median(fn: Callable[[], object], setup: Callable[[], object] | None = None) -> float:
        times = []
        for _ in range(repeat):
            if setup is not None:
                setup()
            times.append(timed(fn))
        return statistics.median(times)

    info = {"raw update-ref --stdin of apply's 13-ref transaction":
            median(raw_transaction, transaction_setup),
            "raw git worktree list --porcelain (linked worktrees only)": median(raw_worktrees)}
    repo.git.close()
    return rows, info


def cli_startup(repo_dir: Path, repeat: int) -> dict[str, float]:
    print("  measuring process start-up ...", file=sys.stderr, flush=True)

    def python_pass() -> None:
        subprocess.run([sys.executable, "-c", "pass"], check=True)

    def expgit_list() -> None:
        subprocess.run([sys.executable, "-m", "expgit", "-C", str(repo_dir), "list", "--json"],
                       check=True, capture_output=True)

    def git_spawn() -> None:
        subprocess.run(["git", "-C", str(repo_dir), "rev-parse", "main"], check=True,
                       capture_output=True)

    def median(fn: Callable[[], object]) -> float:
        return statistics.median(timed(fn) for _ in range(repeat))

    return {"python -c pass": median(python_pass),
            "python -m expgit list --json (whole process)": median(expgit_list),
            "one `git rev-parse` process": median(git_spawn)}


def report(rows: list[Row], info: dict[str, float], args: argparse.Namespace) -> None:
    print(f"expgit core benchmark: {args.experiences} experiences, {args.commits} history "
          f"commits, median of {args.repeat} runs; expgit in-process vs raw git CLI")
    print(f"{'operation':<38} {'expgit ms':>10} {'raw ms':>9} {'ratio':>7}  {'target':<12} met")
    for row in rows:
        print(f"{row.label:<38} {row.expgit_ms:10.1f} {row.raw_ms:9.1f} {row.ratio:6.2f}x  "
              f"{row.target:<12} {'yes' if row.ok else 'NO'}")
    print("\nfor information (not part of the ratios):")
    for label, ms in info.items():
        print(f"  {label:<58} {ms:8.1f} ms")


if __name__ == "__main__":
    main()
