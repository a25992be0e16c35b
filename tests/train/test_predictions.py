"""The candidate eval's check of predictions: hit, miss, unchecked, unpredicted flips."""

from __future__ import annotations

from expgit.core.domain import Case, Rollout, Rubric, RubricEvaluation
from expgit.store.derived.predictions import (
    GradientPrediction,
    PredictionRecords,
    TrackRecord,
    prediction,
    read_prediction,
    read_verdicts,
    shown_confidence,
    verdict_trailers,
)
from expgit.train.measurement.predictions import check_predictions


def run(case: str, task: str, passed: bool) -> Rollout:
    return Rollout(case=Case(name=case, task_signature=task, rubric=Rubric(name="r")),
                   policy_snapshot_id="s",
                   evaluation=RubricEvaluation(passed=passed, score=float(passed)))


def predicts(commit: str, cases: list[str], tasks: list[str]) -> GradientPrediction:
    return GradientPrediction(commit * 40, "lesson-" + commit, prediction(cases, tasks), "m")


def test_each_verdict_and_the_unpredicted_flips() -> None:
    baseline = [run("a", "t1", False), run("b", "t1", False), run("c", "t2", True),
                run("d", "t3", False), run("e", "t4", True)]
    candidate = [run("a", "t1", True), run("b", "t1", False), run("c", "t2", False),
                 run("d", "t3", True), run("e", "t4", True)]
    checks, unpredicted = check_predictions(
        [predicts("1", ["a"], []), predicts("2", ["b"], []), predicts("3", [], ["t2"]),
         predicts("4", ["zz"], ["t9"]), predicts("5", [], ["t4"]),
         GradientPrediction("6" * 40, "quiet", prediction([], []), None)],
        baseline, candidate)
    assert [(c.experience, c.verdict, c.reason) for c in checks] == [
        ("lesson-1", "hit", "a went fail -> pass"),
        ("lesson-2", "miss", "b still fail"),
        ("lesson-3", "miss", "c went pass -> fail"),
        ("lesson-4", "unchecked", "no held-out case of its cases or tasks"),
        ("lesson-5", "unchecked", "its held-out cases passed already")]
    assert checks[0].observed == ["a fail->pass"] and checks[0].gradient == "1" * 12
    assert unpredicted == ["d fail->pass"]  # a flip no edit predicted


def test_a_task_signature_covers_every_case_of_it_and_trials_vote() -> None:
    baseline = [run("x", "t", False), run("x", "t", False)]
    candidate = [run("x", "t", True), run("x", "t", False)]  # half the trials: a pass
    [check], unpredicted = check_predictions([predicts("7", ["train-case"], ["t"])],
                                             baseline, candidate)
    assert check.verdict == "hit" and unpredicted == []


def test_trailers_round_trip_and_the_shown_confidence() -> None:
    p = prediction(["case  one\n", "case  one"], ["task"])
    assert p.cases == ("case one",) and read_prediction(p.trailers()) == p
    malformed = [("Expgit-Prediction", "short hit"), ("Expgit-Prediction", "c" * 40 + " maybe")]
    assert read_verdicts([*verdict_trailers([("a" * 40, "hit"), ("b" * 40, "miss")]),
                          *malformed]) == {"a" * 40: "hit", "b" * 40: "miss"}
    records = PredictionRecords()
    for verdict in ("miss", "miss", "unchecked"):
        records.add("lesson", "m", verdict)
    assert records.by_model["m"] == TrackRecord(0, 2) == records.by_experience["lesson"]
    assert shown_confidence(0.8, records.of("lesson", "m")) == 0.4  # 0.8 * 2 / 4
    assert shown_confidence(0.8, records.of("lesson", "other")) == 0.8  # no record
    assert shown_confidence(0.8, records.of("lesson", None)) == 0.4  # by its experience
