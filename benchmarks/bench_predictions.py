"""What the prediction track record costs to read (run by hand; asserts nothing).

    python benchmarks/bench_predictions.py [--proposals 100 1000 3000]

:func:`expgit.store.derived.predictions.prediction_record` reads the ``Expgit-Prediction``
trailers of every kept proposal and the target of every gradient they name; ``merge``
(every proposal's PR description), ``list --stats`` and ``evidence`` call it once per
process. For each size this builds a repository from example_repo/ with that many
proposals of two gradients each (commits written directly, as ``merge`` and the
candidate stage would leave them: one hit or miss per gradient), then prints the
milliseconds of the first call with nothing cached (cold), of the first call of a next
process (the derived cache file of the commits' trailers, :mod:`expgit.store.derived.cache`,
written by the cold one), of a repeated call with no new ref (cached: the refs are still
listed), the cold cost per proposal, a cold ``list_proposals`` of every state (what
``expgit proposals --state all`` reads) for scale, and cold / next process.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from expgit.git.repo import RefUpdate
from expgit.init import init_repository
from expgit.store.derived import predictions
from expgit.store.derived.cache import index_file
from expgit.store.format import trailers as tr
from expgit.store.refnames import GRADIENTS, ID_LEN, PROPOSALS
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.proposals import list_proposals

EXAMPLE = Path(__file__).resolve().parents[1] / "example_repo"


def build(path: Path, count: int) -> ExperienceRepository:
    init_repository(path, seed=EXAMPLE)
    repo = ExperienceRepository.open(path)
    git, main = repo.git, repo.main_commit()
    tree = git.read_commit(main).tree
    updates = []
    for i in range(count):
        grads = []
        for j in range(2):
            message = tr.Message(f"gradient: update lesson-{i % 50}", "why", (
                (tr.TARGET, f"lesson-{i % 50}"), (tr.CONFIDENCE, "0.70"),
                (predictions.PREDICTS, f"case-{i}-{j}"),
                (predictions.TRAINER_MODEL, f"model-{j}"))).render()
            sha = git.write_commit(tree, [main], message)
            grads.append(sha)
            updates.append(RefUpdate(GRADIENTS + sha[:ID_LEN], sha, None))
        verdicts = [(g, "hit" if (i + k) % 3 else "miss") for k, g in enumerate(grads)]
        message = tr.Message(f"expgit: update 1 experience: lesson-{i % 50}", "body", (
            *((tr.GRADIENT, g) for g in grads),
            *predictions.verdict_trailers(verdicts))).render()  # type: ignore[arg-type]
        sha = git.write_commit(tree, [main], message)
        updates.append(RefUpdate(PROPOSALS + sha[:ID_LEN], sha, None))
    git.update_refs(updates, "bench")
    return ExperienceRepository.open(path)


def timed(call: Callable[..., object], *args: object) -> float:
    started = time.perf_counter()
    call(*args)
    return (time.perf_counter() - started) * 1000


def forget(repo: ExperienceRepository, *, disk: bool) -> ExperienceRepository:
    """As a new process finds it: no memory of earlier reads (and, with ``disk``, no
    derived index either: the file and its WAL)."""
    predictions._Cache.results.clear()
    predictions._Cache.facts = {}
    if disk:
        index = index_file(repo.git.common_dir)
        for stale in index.parent.glob(f"{index.name}*"):
            stale.unlink()
    return ExperienceRepository.open(repo.git.work_tree or repo.git.git_dir)


def measure(path: Path, count: int) -> str:
    repo = build(path, count)
    cold = timed(predictions.prediction_record, forget(repo, disk=True))
    records = predictions.prediction_record(repo)
    assert sum(r.checked for r in records.by_model.values()) == 2 * count
    next_process = timed(predictions.prediction_record, forget(repo, disk=False))
    cached = timed(predictions.prediction_record, repo)
    listing = timed(list_proposals, forget(repo, disk=False),
                    ("open", "applied", "rejected"))
    return (f"{count:>9} {cold:>9.1f} {next_process:>9.1f} {cached:>9.1f} "
            f"{cold / count:>11.3f} {listing:>10.1f} {cold / next_process:>6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", type=int, nargs="+", default=[100, 1000, 3000])
    args = parser.parse_args()
    print(f"{'proposals':>9} {'cold ms':>9} {'next ms':>9} {'cached ms':>9} "
          f"{'ms/proposal':>11} {'list ms':>10} {'cold/next':>6}")
    for count in args.proposals:
        with tempfile.TemporaryDirectory() as tmp:
            print(measure(Path(tmp) / "repo", count))


if __name__ == "__main__":
    main()
