"""Predictions, then checks, through the real CLI against the strict scripted server: each
edit of a failed rollout predicts that case (and task) will turn to pass; the candidate
eval checks it; the run report, ``expgit list --stats`` and ``expgit evidence`` keep the
hit rate per experience and per proposing model; a miss lowers the confidence shown to
reviewers (``evidence``, the PR body), never the stored one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli_support import cases_file
from conftest import git
from scripted_pipeline import BAGGAGE_CASE, GOLD_RULE, PETS_CASE
from test_cli_candidate import steps_with

from expgit.store.derived.cache import index_file
from expgit.store.derived.predictions import TrackRecord, _Cache, prediction_record
from expgit.store.repository import ExperienceRepository

MISS = {"hits": 0, "misses": 1, "hit_rate": 0.0}


def clueless(messages: list[dict[str, str]]) -> str:
    """An agent no lesson helps."""
    return "Sorry, I do not know."


def test_a_missed_prediction_is_kept_per_experience_and_model_and_lowers_shown_confidence(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    # baseline and candidate eval of the baggage case: 2 rollouts after training's (the
    # final eval of the unchanged main is the baseline's)
    server = serve(steps_with(seeded_repo, clueless, [clueless] * 2))
    result = run_cli("-C", path, "train", "--cases",
                     cases_file(tmp_path / "t.yaml", BAGGAGE_CASE, PETS_CASE),
                     "--eval-cases", cases_file(tmp_path / "e.yaml", BAGGAGE_CASE),
                     "--llm", "openai", "--base-url", server.url,
                     "--report", tmp_path / "run.json")
    assert result.code == 0, result.err
    server.chat.assert_done()
    report = json.loads((tmp_path / "run.json").read_text())
    [candidate] = report["candidates"]
    by_target = {c["experience"]: c for c in candidate["predictions"]}
    baggage, pets = by_target["checked-baggage-allowance"], by_target["pets-in-cabin"]
    assert (baggage["cases"], baggage["tasks"]) == ([BAGGAGE_CASE.name], ["checked-baggage"])
    assert baggage["verdict"] == "miss" and baggage["reason"] == \
        f"{BAGGAGE_CASE.name} still fail"
    assert baggage["observed"] == [f"{BAGGAGE_CASE.name} fail->fail"]
    assert pets["verdict"] == "unchecked"  # no held-out case of its case or task
    assert candidate["unpredicted_flips"] == []
    assert report["hit_rates"] == {"by_experience": {"checked-baggage-allowance": MISS},
                                   "by_model": {"gpt-4o-mini": MISS}}
    assert "predictions: 0 hit, 1 missed, 1 unchecked; hits by experience: " \
           "checked-baggage-allowance 0/1; by model: gpt-4o-mini 0/1" in result.out
    [pid] = report["proposals"]
    message = git(path, "log", "-1", "--format=%B", f"expgit/proposals/{pid}")
    assert f"| `{baggage['gradient']}` | `checked-baggage-allowance` | " \
           f"{BAGGAGE_CASE.name}; any case of task checked-baggage | " \
           f"{BAGGAGE_CASE.name} fail->fail | **miss** ({BAGGAGE_CASE.name} still fail) |" \
           in message
    assert f"Expgit-Prediction: {baggage['gradient_commit']} miss" in message

    # list --stats: the hit rate per experience, and per proposing model
    listed = json.loads(run_cli("-C", path, "list", "--stats", "--json").out)
    rows = {e["name"]: e["stats"]["predictions"] for e in listed["experiences"]}
    assert rows["checked-baggage-allowance"] == MISS
    assert all(v == {"hits": 0, "misses": 0, "hit_rate": None}
               for k, v in rows.items() if k != "checked-baggage-allowance")
    assert listed["models"] == {"gpt-4o-mini": MISS}
    human = run_cli("-C", path, "list", "--stats").out
    assert "HITS" in human and "prediction hits by proposing model: gpt-4o-mini 0/1" in human
    [line] = [r for r in human.splitlines() if r.startswith("checked-baggage-allowance")]
    assert " 0/1 " in line

    # read from the trailers; a next process starts from the derived index, and a
    # corrupt one is only rebuilt
    repo = ExperienceRepository.open(path)
    first = prediction_record(repo)
    cache = index_file(repo.git.common_dir)
    for damage in (None, b"{not sqlite" * 1000):
        if damage is not None:
            cache.write_bytes(damage)
        _Cache.results.clear()
        _Cache.facts = {}
        assert prediction_record(ExperienceRepository.open(path)) == first
        assert cache.exists()
    assert first.by_experience == {"checked-baggage-allowance": TrackRecord(0, 1)}

    # shown to reviewers: the stated 0.70 times (0 + 2) / (1 + 2); stored as stated
    shown = json.loads(run_cli("-C", path, "evidence", baggage["gradient"], "--json").out)
    [edit] = shown["edits"]
    assert (edit["confidence"], edit["shown_confidence"]) == (0.7, 0.4667)
    assert edit["verdict"] == "miss" and edit["track_record"]["factor"] == 0.6667
    assert "Expgit-Confidence: 0.70" in git(path, "log", "-1", "--format=%B",
                                            baggage["gradient_commit"])
    text = run_cli("-C", path, "evidence", baggage["gradient"]).out
    assert "confidence: 0.70 stated, 0.47 shown (model gpt-4o-mini: predictions hit 0 of " \
           "1 checked)" in text

    # an edit by hand names no model: it follows its experience's record in the PR body
    lesson = tmp_path / "lesson.md"
    current = git(path, "show", "main:experiences/checked-baggage-allowance.md")
    lesson.write_text(current + GOLD_RULE.replace("3 free", "three free"))
    gid = json.loads(run_cli("-C", path, "propose", "checked-baggage-allowance",
                             "--content-file", lesson, "--rationale", "by hand",
                             "--confidence", "0.9", "--json").out)["id"]
    merged = run_cli("-C", path, "merge", gid, "--json")
    assert merged.code == 0, merged.err
    description = json.loads(run_cli("-C", path, "review", json.loads(merged.out)["id"],
                                     "--json").out)["description"]
    assert "| 0.90 (shown 0.60: predictions hit 0/1) |" in description
    assert f"- `expgit evidence {gid}`: update `checked-baggage-allowance`\n" in description
