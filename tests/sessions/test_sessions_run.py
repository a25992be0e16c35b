"""``sessions run``: segment, label and train pending work with the strict scripted LLM;
thresholds; the CLI end to end against a scripted OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import fsck, git, repo_state
from json_shapes import assert_shape
from scripted_pipeline import lesson_bodies, merge_of, reflect_for

from expgit.core.domain import Message
from expgit.llm.factory import LLMRuntime
from expgit.llm.port import ChatMessages
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.sessions.ingest.command import ingest
from expgit.sessions.metrics import METRIC_NAMES, MetricScore, SegmentMetrics
from expgit.sessions.run import run
from expgit.sessions.store import SessionStore
from expgit.store.repository import ExperienceRepository
from expgit.train.records.trajectory_store import TrajectoryStore

GOLD = [{"role": "user", "content": "I am a gold member flying economy. How many checked "
                                    "bags are free?"},
        {"role": "assistant", "content": "Gold economy: 3 free checked bags."}]
PETS = [{"role": "user", "content": "Can I bring my cat in the cabin?"},
        {"role": "assistant", "content": "Sorry, I do not know."}]


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def score_reply(messages: ChatMessages) -> str:
    good = "gold member" in messages[1]["content"]
    value = 0.9 if good else 0.3
    verdict = {"score": value, "reason": "the transcript shows it"}
    return json.dumps({"task_type": "customer-support",
                       **{name: verdict for name in METRIC_NAMES}})


class FixedScorer:
    """Returns the overall score named in the segment's topic; no LLM."""

    def __init__(self) -> None:
        self.calls = 0

    async def score(self, messages: Sequence[Message], topic: str) -> SegmentMetrics:
        self.calls += 1
        value = float(topic.split()[-1])
        return SegmentMetrics(overall_score=value, task_type="qa", metrics={
            name: MetricScore(score=value, reason="fixed") for name in METRIC_NAMES})


def ingest_files(repo: ExperienceRepository, *files: Path) -> None:
    asyncio.run(ingest(repo, list(files)))


def test_thresholds_are_inclusive(seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    files = [write(tmp_path / f"s{value}.jsonl",
                   [{"role": "user", "content": f"question scored {value}"},
                    {"role": "assistant", "content": "answer"}])
             for value in ("0.69", "0.70", "0.79", "0.80")]
    ingest_files(seeded_repo, *files)
    scorer = FixedScorer()
    report = asyncio.run(run(seeded_repo, llm=None, scorer=scorer))
    assert scorer.calls == 4 and len(report.labelled) == 4 and report.trained == []
    flags = {s.topic.split()[-1]: (s.memory_eligible, s.sft_eligible)
             for m in SessionStore(seeded_repo).manifests() for s in m.segments}
    assert flags == {"0.69": (False, False), "0.70": (True, False),
                     "0.79": (True, False), "0.80": (True, True)}
    assert all(m.status == "labelled" for m in SessionStore(seeded_repo).manifests())
    again = asyncio.run(run(seeded_repo, llm=None, scorer=scorer))
    assert scorer.calls == 4 and again.commits == []  # nothing left to label


def training_script(repo: ExperienceRepository) -> ScriptedChatModel:
    bodies = {"checked-baggage-allowance": lesson_bodies(repo)["checked-baggage-allowance"]}
    return ScriptedChatModel([
        Step("score", score_reply), Step("score", score_reply),
        Step("reflect", reflect_for(bodies)), Step("merge", merge_of(bodies))])


def test_run_labels_and_trains_eligible_segments_into_a_proposal(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    ingest_files(seeded_repo, write(tmp_path / "gold.jsonl", GOLD),
                 write(tmp_path / "pets.jsonl", PETS))
    main = seeded_repo.main_commit()
    chat = training_script(seeded_repo)
    runtime = LLMRuntime.fixed(chat)
    report = asyncio.run(run(seeded_repo, llm=runtime))
    chat.assert_done()
    assert {s: u.calls for s, u in runtime.meter.by_stage().items()} == {
        "score": 2, "reflect": 1, "merge": 1}
    assert report.errors == [] and len(report.labelled) == 2
    assert seeded_repo.main_commit() == main and report.main_after == main
    [gradient] = report.gradients
    [proposal] = report.proposals
    segments = {s.topic: s for m in SessionStore(seeded_repo).manifests() for s in m.segments}
    gold = segments["I am a gold member flying economy. How many checked bags are free?"]
    pets = segments["Can I bring my cat in the cabin?"]
    assert report.trained == [gold.fingerprint]
    assert gold.memory_eligible and gold.sft_eligible and gold.trained
    assert gold.metrics is not None and gold.metrics.overall_score == 0.9
    assert gold.gradient_ids == [gradient] and gold.proposal_ids == [proposal]
    assert not pets.memory_eligible and not pets.trained and pets.metrics is not None
    # the gradient cites the segment's trajectory, which names the segment
    assert gold.trajectory_uri is not None
    body = git(tmp_path / "repo", "log", "-1", "--format=%B",
               f"refs/heads/expgit/gradients/{gradient}")
    assert f"Expgit-Evidence: {gold.trajectory_uri}" in body
    document = TrajectoryStore(seeded_repo).read(gold.trajectory_uri)
    assert f"case: session-{gold.fingerprint}" in document
    assert "task_signature: session:customer-support" in document
    fsck(tmp_path / "repo")
    # a second run finds nothing to do: no call, no commit
    before = repo_state(tmp_path / "repo")
    idle = ScriptedChatModel([])
    again = asyncio.run(run(seeded_repo, llm=LLMRuntime.fixed(idle)))
    assert idle.calls == [] and again.commits == [] and again.trained == []
    assert repo_state(tmp_path / "repo") == before


def test_run_segments_pending_sessions_and_keeps_invalid_ones_pending(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    rows = GOLD + PETS
    ingest_files(seeded_repo, write(tmp_path / "two-tasks.jsonl", rows),
                 write(tmp_path / "other.jsonl", PETS + GOLD))
    bad = json.dumps({"tasks": [{"start": 2, "topic": "gold"}]})  # does not start at 1
    good = json.dumps({"tasks": [{"start": 1, "end": 2, "topic": "cat in cabin"},  # an end
                                 {"start": 3, "topic": "gold bags"}]})  # is ignored

    def segment(messages: ChatMessages) -> str:  # the first session gets bad replies
        return bad if messages[1]["content"].index("gold member") < \
            messages[1]["content"].index("my cat") else good

    def low_score(messages: ChatMessages) -> str:
        verdict = {"score": 0.3, "reason": "unfinished"}
        return json.dumps({"task_type": "qa", **{n: verdict for n in METRIC_NAMES}})

    chat = ScriptedChatModel([Step("segment", segment), Step("segment", segment),
                              Step("segment", segment),
                              Step("score", low_score), Step("score", low_score)])
    report = asyncio.run(run(seeded_repo, llm=LLMRuntime.fixed(chat), batch_size=10))
    chat.assert_done()  # 2 tries for the bad session, 1 for the good one, 2 labels
    assert report.errors == [] and report.trained == [] and len(report.labelled) == 2
    manifests = {m.status: m for m in SessionStore(seeded_repo).manifests()}
    assert set(manifests) == {"pending", "labelled"}
    pending = manifests["pending"]
    assert pending.status_reason is not None and "invalid twice" in pending.status_reason
    assert pending.resume_from == 0 and pending.segments == []
    assert [s.topic for s in manifests["labelled"].segments] == ["cat in cabin", "gold bags"]
    assert list(report.pending) == [pending.session_key]
    assert report.segmented == [manifests["labelled"].session_key]




@pytest.mark.slow
def test_cli_ingest_status_run(run_cli: Any, seeded_repo: ExperienceRepository,
                               tmp_path: Path, serve: Any) -> None:
    repo_dir = tmp_path / "repo"
    broken = tmp_path / "gold.jsonl"
    broken.write_text(json.dumps(GOLD[0]) + "\nnot json\n\n" + json.dumps(GOLD[1]) + "\n")
    pets = write(tmp_path / "pets.jsonl", PETS)
    out = run_cli("-C", repo_dir, "sessions", "ingest", broken, pets, "--agent", "bot",
                  "--json")
    assert out.code == 0, out.err
    data = json.loads(out.out)
    assert_shape("sessions ingest", data)
    assert data["files"][0]["invalid_lines"] == [2] and data["invalid_lines"] == 1
    assert "1 invalid line(s) skipped: 2" in out.err
    status = json.loads(run_cli("-C", repo_dir, "sessions", "status", "--json").out)
    assert_shape("sessions status", status)
    assert (status["sessions"], status["segments"], status["labelled"]) == (2, 2, 0)

    server = serve(training_script(seeded_repo).steps)
    out = run_cli("-C", repo_dir, "sessions", "run", "--base-url", server.url, "--json")
    assert out.code == 0, out.err
    assert server.unexpected == [] and server.requests == 4
    result = json.loads(out.out)
    assert_shape("sessions run", result)
    assert len(result["proposals"]) == 1 and len(result["trained"]) == 1
    assert result["usage"]["total"]["calls"] == 4
    assert result["main_before"] == result["main_after"]
    status = json.loads(run_cli("-C", repo_dir, "sessions", "status", "--json").out)
    assert (status["labelled"], status["memory_eligible"], status["sft_eligible"],
            status["trained"]) == (2, 1, 1, 1)
    text = run_cli("-C", repo_dir, "sessions", "status").out
    assert "sessions: 2 (labelled 2)" in text and "trained 1" in text
