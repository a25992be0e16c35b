"""Training groups (``[train] group_size`` = K > 1): K runs of each case, told apart.

:func:`group_cases` lays each case out K times in a row, run ``i`` carrying
``metadata["group_run"]`` = ``{"run": i, "runs": K, "seed": i + 1, "temperature": T}``
(``T``: ``[train] group_temperature``). The in-process executors sample each run's
``rollout`` calls at that temperature and seed (:func:`sampling_of`), so the runs
differ; a remote environment receives the case with that metadata and may seed its own
randomness (a simulated user, a shuffled database) from it. The executor returns the
rollouts in the order of the cases, so :func:`split_groups` cuts them back into groups.

A group teaches something only when its runs differ: :func:`verdict` is what two runs
must share to count as the same evaluation (both passed, or both failed the same
criteria).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ValidationError

from expgit.core.domain import Case, Rollout, RubricEvaluation
from expgit.errors import UsageError
from expgit.llm.port import Sampling
from expgit.store.format.settings import MAX_GROUP_SIZE

GROUP_KEY = "group_run"  # in a case's (and its rollout's) metadata


class GroupSeat(BaseModel):
    """Which run of a group a case is (``metadata["group_run"]``), with its sampling."""

    run: int
    runs: int
    seed: int | None = None
    temperature: float = 0.7

    @classmethod
    def of(cls, case: Case) -> GroupSeat | None:
        """The case's run; None: not a group's (or not readable as one)."""
        raw = case.metadata.get(GROUP_KEY)
        if not isinstance(raw, dict):
            return None
        try:
            return cls.model_validate(raw)
        except ValidationError:
            return None


class GroupRun(BaseModel):
    """One run of a group as its stored trajectory names it: its rollout's content id,
    its evaluation in short, its error, and its transcript's reference once transcripts
    are stored beside trajectories (None until then)."""

    run: int
    rollout_id: str
    passed: bool | None
    score: float | None
    failed_criteria: list[str]
    error: str | None = None
    transcript: str | None = None


def check_group_size(flag: int | None, setting: int) -> int:
    """The run's group size: ``--group-size`` (1 to 64, else exit 2), else the setting
    (``expgit.toml`` already bounds it: exit 5)."""
    if flag is not None and not 1 <= flag <= MAX_GROUP_SIZE:
        raise UsageError(f"--group-size {flag}: a group has 1 to {MAX_GROUP_SIZE} runs")
    return flag if flag is not None else setting


def group_cases(cases: Sequence[Case], size: int, temperature: float) -> list[Case]:
    """Each case ``size`` times in a row, each run with its own seed (module docstring);
    ``size`` 1: the cases as they are."""
    if size <= 1:
        return list(cases)
    return [case.model_copy(update={"metadata": {**case.metadata, GROUP_KEY: GroupSeat(
        run=run, runs=size, seed=run + 1, temperature=temperature).model_dump()}})
            for case in cases for run in range(size)]


def sampling_of(case: Case) -> Sampling | None:
    """The sampling of a group's run (None: not a group's, the runtime's own)."""
    run = GroupSeat.of(case)
    return Sampling(temperature=run.temperature, seed=run.seed) if run else None


def split_groups(rollouts: Sequence[Rollout], size: int) -> list[list[Rollout]]:
    """The rollouts of :func:`group_cases`'s cases, ``size`` consecutive ones a group;
    UsageError when they are not laid out so (a count that is not a multiple of
    ``size``, or a group of several cases)."""
    if len(rollouts) % size:
        raise UsageError(f"{len(rollouts)} rollouts cannot form groups of {size}")
    groups = [list(rollouts[i:i + size]) for i in range(0, len(rollouts), size)]
    for group in groups:
        names = {r.case.name for r in group}
        if len(names) > 1:
            raise UsageError(f"a group of {size} runs mixes the cases {sorted(names)}")
    return groups


def failed_criteria(evaluation: RubricEvaluation | None) -> list[str]:
    if evaluation is None:
        return []
    return sorted(r.criterion_name for r in evaluation.criterion_results if not r.passed)


def verdict(evaluation: RubricEvaluation) -> tuple[bool, tuple[str, ...]]:
    """What two runs with the same evaluation share: both passed (whatever optional
    criteria failed), or both failed with the same failed criteria."""
    return evaluation.passed, () if evaluation.passed else tuple(failed_criteria(evaluation))


def rank_key(evaluation: RubricEvaluation) -> tuple[bool, float, int]:
    """Better first when sorted in reverse: passed, then score, then fewer failures."""
    return evaluation.passed, evaluation.score, -len(failed_criteria(evaluation))


class GroupDocument(BaseModel):
    """What a group's stored trajectory adds to a run's: every run, and the difference
    that decided the outcome (the model's words, redacted)."""

    runs: list[GroupRun]
    difference: str
