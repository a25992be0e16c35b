"""Predictions of edits and their checks, as trailers, and the track record they make.

A gradient made by training names what it expects to change: the case of the rollout it
came from (``Expgit-Predicts: <case>``) and that case's task signature
(``Expgit-Predicts-Task: <signature>``), written only when that rollout failed (the edit
should turn it from fail to pass). expgit derives them from the rollout, never from the
model's reply, so a model cannot invent them. ``Expgit-Trainer-Model`` names the model
that proposed the edit. A proposal carries its gradients' predictions too.

The candidate eval checks them (:mod:`expgit.train.measurement.predictions`) and the measured
proposal records one ``Expgit-Prediction: <gradient commit> <verdict>`` trailer per
gradient that predicted something (verdict ``hit``, ``miss`` or ``unchecked``).
:func:`prediction_record` reads those back from every kept proposal: hits and misses per
experience and per proposing model, derived from git alone. The confidence shown to a
reviewer is the stated one times a factor of that record (:func:`shown_confidence`);
the stored confidence stays as the model wrote it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from expgit.store.derived.cache import DerivedIndex, derive
from expgit.store.format import trailers as tr
from expgit.store.format.provenance import TRAINER_MODEL
from expgit.store.refnames import GRADIENT_STATES, PROPOSAL_STATES, kept_commits
from expgit.store.repository import ExperienceRepository

PREDICTS = "Expgit-Predicts"
PREDICTS_TASK = "Expgit-Predicts-Task"
PREDICTION = "Expgit-Prediction"

Verdict = Literal["hit", "miss", "unchecked"]
VERDICTS: tuple[Verdict, ...] = ("hit", "miss", "unchecked")
VALUE_CHARS = 200  # of one trailer value: a case name or task signature


@dataclass(frozen=True)
class Prediction:
    """What an edit expects to turn from fail to pass: cases by name, or any case of
    these task signatures. Empty: it predicts nothing."""

    cases: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.cases or self.tasks)

    def covers(self, case: str, task: str) -> bool:
        return case in self.cases or task in self.tasks

    def describe(self) -> str:
        """``"case a, case b, any case of task t"``; "" when it predicts nothing."""
        return ", ".join([*self.cases, *(f"any case of task {t}" for t in self.tasks)])

    def trailers(self) -> list[tuple[str, str]]:
        return [*((PREDICTS, c) for c in self.cases), *((PREDICTS_TASK, t) for t in self.tasks)]


def _one_line(value: str) -> str | None:
    text = " ".join(value.split())[:VALUE_CHARS]
    return text or None


def prediction(cases: Iterable[str], tasks: Iterable[str]) -> Prediction:
    """A prediction of these names (whitespace folded, bounded, each once)."""
    def clean(values: Iterable[str]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v for v in map(_one_line, values) if v))
    return Prediction(clean(cases), clean(tasks))


def read_prediction(trailers: Sequence[tuple[str, str]]) -> Prediction:
    """The prediction a commit's trailers hold."""
    key = {PREDICTS.lower(): "case", PREDICTS_TASK.lower(): "task"}
    cases = [v for k, v in trailers if key.get(k.lower()) == "case"]
    tasks = [v for k, v in trailers if key.get(k.lower()) == "task"]
    return prediction(cases, tasks)


def trainer_model(trailers: Sequence[tuple[str, str]]) -> str | None:
    return next((v for k, v in trailers if k.lower() == TRAINER_MODEL.lower() and v), None)


def verdict_trailers(verdicts: Iterable[tuple[str, Verdict]]) -> list[tuple[str, str]]:
    """``Expgit-Prediction`` trailers of ``(gradient commit, verdict)`` pairs."""
    return [(PREDICTION, f"{commit} {verdict}") for commit, verdict in verdicts]


def read_verdicts(trailers: Sequence[tuple[str, str]]) -> dict[str, Verdict]:
    """``{gradient commit: verdict}`` of a proposal's ``Expgit-Prediction`` trailers
    (malformed ones are left out)."""
    found: dict[str, Verdict] = {}
    for key, value in trailers:
        commit, _, verdict = value.partition(" ")
        if key.lower() == PREDICTION.lower() and len(commit) == 40:
            for known in VERDICTS:
                if verdict.strip() == known:
                    found[commit] = known
    return found


@dataclass
class TrackRecord:
    """Checked predictions: ``hits`` and ``misses`` (unchecked ones do not count)."""

    hits: int = 0
    misses: int = 0

    @property
    def checked(self) -> int:
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.checked if self.checked else None

    @property
    def factor(self) -> float:
        """What the stated confidence is multiplied by when shown: (hits + 2) /
        (checked + 2), 1 with no record; one miss 0.67, two 0.5, four 0.33."""
        return (self.hits + PRIOR) / (self.checked + PRIOR)

    def as_dict(self) -> dict[str, object]:
        rate = self.hit_rate
        return {"hits": self.hits, "misses": self.misses,
                "hit_rate": None if rate is None else round(rate, 4)}


PRIOR = 2  # pseudo-hits: a single miss lowers the shown confidence only a little


@dataclass
class PredictionRecords:
    """The track record of checked predictions, per target experience and per proposing
    model (``unknown`` for gradients that name none)."""

    by_experience: dict[str, TrackRecord] = field(default_factory=dict)
    by_model: dict[str, TrackRecord] = field(default_factory=dict)
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # by gradient commit

    def add(self, experience: str, model: str | None, verdict: Verdict) -> None:
        if verdict == "unchecked":
            return
        for table, key in ((self.by_experience, experience), (self.by_model,
                                                              model or UNKNOWN_MODEL)):
            record = table.setdefault(key, TrackRecord())
            record.hits += verdict == "hit"
            record.misses += verdict == "miss"

    def of(self, experience: str, model: str | None) -> TrackRecord:
        """The record a gradient's shown confidence follows: its model's, else (no
        model named) its experience's."""
        if model:
            return self.by_model.get(model, TrackRecord())
        return self.by_experience.get(experience, TrackRecord())


UNKNOWN_MODEL = "unknown"


def shown_confidence(stated: float, record: TrackRecord) -> float:
    """The confidence shown to reviewers: the stated one times the record's factor."""
    return round(stated * record.factor, 4)


class _Cache:
    lock: ClassVar[threading.Lock] = threading.Lock()
    # (common dir, proposal refs, gradient refs) -> records
    results: ClassVar[dict[tuple[str, frozenset[str], frozenset[str]], PredictionRecords]] = {}
    facts: ClassVar[dict[str, list[Any]]] = {}  # commit -> what its message says


FACTS_TABLE = "prediction_facts"  # "p:<commit>" | "g:<commit>" -> the JSON of its fact
FACTS_DDL = "CREATE TABLE prediction_facts (key TEXT PRIMARY KEY, fact TEXT NOT NULL) " \
    "WITHOUT ROWID"
_FACTS_KEPT = 65536


def _facts(repo: ExperienceRepository, commits: Iterable[str], kind: str,
           known: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """What each commit's message says: a proposal's ``[author time, {gradient commit:
    verdict}]``, a gradient's ``[target or None, model or None]``. ``known`` (by commit
    id: a commit never changes) is used first and extended."""
    found: dict[str, list[Any]] = {}
    for commit in commits:
        key = f"{kind}:{commit}"
        if key not in known:
            info = repo.git.read_commit(commit)
            message = tr.parse_message(info.message)
            known[key] = ([info.author_time, read_verdicts(message.trailers)]
                          if kind == "p" else
                          [message.value(tr.TARGET), trainer_model(message.trailers)])
        found[commit] = known[key]
    return found


def _stored_facts(ix: DerivedIndex) -> dict[str, list[Any]]:
    ix.table(FACTS_TABLE, 1, FACTS_DDL)
    return {key: json.loads(fact)
            for key, fact in ix.db.execute("SELECT key, fact FROM prediction_facts")}


def _keep_facts(ix: DerivedIndex, known: dict[str, list[Any]], kept: set[str]) -> None:
    """Store the facts of the commits still kept (by ``kept`` key), forget the others."""
    ix.table(FACTS_TABLE, 1, FACTS_DDL)
    ix.update(lambda db: (
        db.executemany("INSERT OR IGNORE INTO prediction_facts VALUES (?, ?)",
                       [(k, json.dumps(v)) for k, v in known.items() if k in kept]),
        db.execute("DELETE FROM prediction_facts WHERE key NOT IN "
                   "(SELECT value FROM json_each(?))", (json.dumps(sorted(kept)),))))


def prediction_record(repo: ExperienceRepository) -> PredictionRecords:
    """The checked predictions of every kept proposal (open, applied, rejected), each
    gradient counted once (its last measurement wins), per experience and per model.
    Reads only: the refs, then only the messages of commits not seen before, in this
    process or (:mod:`expgit.store.derived.cache`) an earlier one; cached in memory by the
    proposal and gradient refs."""
    proposals = kept_commits(repo, PROPOSAL_STATES)
    gradients = kept_commits(repo, GRADIENT_STATES)
    key = (str(repo.git.common_dir), frozenset(proposals), frozenset(gradients))
    with _Cache.lock:
        cached = _Cache.results.get(key)
        known = dict(_Cache.facts)
    if cached is not None:
        return cached
    if not known:
        known = derive(repo.git.common_dir, _stored_facts)
    before = len(known)
    verdicts: dict[str, tuple[int, Verdict]] = {}
    for when, found in _facts(repo, proposals, "p", known).values():
        for commit, verdict in found.items():
            if commit not in verdicts or verdicts[commit][0] <= when:
                verdicts[commit] = (when, verdict)
    # a gradient whose ref is gone has nothing to attribute its verdict to
    named = sorted(c for c in verdicts if c in gradients)
    records = PredictionRecords()
    for commit, (target, model) in _facts(repo, named, "g", known).items():
        if isinstance(target, str):
            verdict = verdicts[commit][1]
            records.verdicts[commit] = verdict
            records.add(target, model if isinstance(model, str) else None, verdict)
    if len(known) != before:
        kept = {f"p:{c}" for c in proposals} | {f"g:{c}" for c in named}
        known = {k: v for k, v in known.items() if k in kept}
        derive(repo.git.common_dir, lambda ix: _keep_facts(ix, known, kept))
    with _Cache.lock:
        _Cache.facts = known if len(known) <= _FACTS_KEPT else {}
        if len(_Cache.results) > 16:
            _Cache.results.clear()
        _Cache.results[key] = records
    return records


@dataclass(frozen=True)
class GradientPrediction:
    """What one gradient commit predicts, read from its trailers."""

    commit: str
    target: str
    prediction: Prediction
    model: str | None


def gradient_predictions(repo: ExperienceRepository, commits: Sequence[str]
                         ) -> list[GradientPrediction]:
    """The predictions of these gradient commits, in order (a commit that is no
    gradient, without ``Expgit-Target``, is left out)."""
    found = []
    for commit in commits:
        message = tr.parse_message(repo.git.read_commit(commit).message)
        target = message.value(tr.TARGET)
        if target is not None:
            found.append(GradientPrediction(commit, target, read_prediction(message.trailers),
                                            trainer_model(message.trailers)))
    return found
