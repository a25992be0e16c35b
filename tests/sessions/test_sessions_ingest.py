"""Ingestion: state on the sessions branch, idempotency, the Day 1 / Day 2 append,
invalidation proposals, redaction before anything reaches git."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path
from typing import Any

from conftest import ROOT, edited, git, repo_state

from expgit.llm.factory import LLMRuntime
from expgit.llm.port import ChatMessages, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.sessions.fingerprint import fingerprint
from expgit.sessions.ingest.command import NO_LLM, ingest
from expgit.sessions.ingest.report import IngestReport
from expgit.sessions.manifest import SessionManifest
from expgit.sessions.metrics import METRIC_NAMES
from expgit.sessions.run import run
from expgit.sessions.store import SessionStore
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.apply import apply_proposal
from expgit.store.workflow.gradients import GradientRequest, propose
from expgit.store.workflow.proposals import find_proposal, merge

FIXTURES = ROOT / "tests" / "fixtures" / "sessions"

DAY1: list[dict[str, Any]] = [
    {"role": "user", "content": "How do I read a CSV file in Python?"},
    {"role": "assistant", "content": "Use pandas: df = pandas.read_csv('data.csv')."},
    {"role": "user", "content": "Write a docker compose file for postgres."},
    {"role": "assistant", "content": "services:\n  db:\n    image: postgres:16"},
    {"role": "user", "content": "Deploy that compose file to staging."},
    {"role": "assistant", "content": "Deploying now.", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "deploy", "arguments": "{\"env\": \"staging\"}"}}]},
]
DAY2_TAIL: list[dict[str, Any]] = [
    {"role": "tool", "tool_call_id": "call_1", "content": "deployed: 3 containers up"},
    {"role": "assistant", "content": "Deployed to staging: the 3 containers are up."},
]


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def reply(*tasks: tuple[int, str]) -> str:
    """A segment reply: where each task starts, and its topic."""
    return json.dumps({"tasks": [{"start": s, "topic": t} for s, t in tasks]})


def llm(*steps: Step) -> tuple[ScriptedChatModel, StructuredLLM]:
    chat = ScriptedChatModel(list(steps))
    return chat, StructuredLLM(chat, UsageMeter())


def do_ingest(repo: ExperienceRepository, files: list[Path], structured: StructuredLLM | None,
              **kwargs: Any) -> IngestReport:
    return asyncio.run(ingest(repo, files, llm=structured, **kwargs))


def only_manifest(repo: ExperienceRepository) -> SessionManifest:
    manifests = SessionStore(repo).manifests()
    assert len(manifests) == 1
    return manifests[0]


def window_numbers(messages: ChatMessages) -> list[str]:
    return [line for line in messages[1]["content"].splitlines()
            if re.match(r"\[\d+\] \w+:$", line)]


def test_a_short_session_is_one_segment_without_the_llm(seeded_repo: ExperienceRepository,
                                                        tmp_path: Path) -> None:
    path = write(tmp_path / "short.jsonl", DAY1[:2])
    report = do_ingest(seeded_repo, [path], None, agent="support-bot")
    assert report.commit is not None and report.files[0].outcome == "new"
    manifest = only_manifest(seeded_repo)
    assert manifest.status == "segmented" and manifest.agent == "support-bot"
    [segment] = manifest.segments
    assert (segment.start, segment.end) == (0, 2)
    assert segment.topic == "How do I read a CSV file in Python?"
    store = SessionStore(seeded_repo)
    assert fingerprint(store.segment_messages(segment.fingerprint)) == segment.fingerprint
    # state lives on its own branch; main is untouched
    assert git(tmp_path / "repo", "ls-tree", "-r", "--name-only", "expgit/sessions").split() \
        == [f"segments/{segment.fingerprint[:2]}/{segment.fingerprint}.json",
            f"sessions/{manifest.session_key[:2]}/{manifest.session_key}.json",
            f"transcripts/{manifest.session_key[:2]}/{manifest.session_key}.json"]


def test_without_an_llm_a_long_session_stays_pending_and_reingest_changes_nothing(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = write(tmp_path / "day.jsonl", DAY1)
    report = do_ingest(seeded_repo, [path], None)
    manifest = only_manifest(seeded_repo)
    assert manifest.status == "pending" and manifest.status_reason == NO_LLM
    assert manifest.resume_from == 0 and manifest.segments == []
    assert report.files[0].status == "pending"
    before = repo_state(tmp_path / "repo")
    again = do_ingest(seeded_repo, [path], None)
    assert again.commit is None and again.files[0].outcome == "unchanged"
    assert repo_state(tmp_path / "repo") == before


def test_reingesting_an_unchanged_file_makes_no_call_and_no_commit(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = write(tmp_path / "day.jsonl", DAY1)
    chat, structured = llm(Step("segment", reply((1, "csv"), (3, "compose"),
                                                  (5, "deploy"))))
    first = do_ingest(seeded_repo, [path], structured)
    chat.assert_done()
    assert first.files[0].segmentation is not None
    assert first.files[0].segmentation.llm_prompts == 1
    before = repo_state(tmp_path / "repo")
    strict, structured_again = llm()  # any call fails the test
    second = do_ingest(seeded_repo, [path], structured_again)
    assert strict.calls == [] and second.commit is None
    assert repo_state(tmp_path / "repo") == before


def test_day1_day2_append_resegments_from_the_last_segment(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = write(tmp_path / "file.jsonl", DAY1)
    chat, structured = llm(Step("segment", reply((1, "csv"), (3, "compose"),
                                                  (5, "deploy, partial"))))
    do_ingest(seeded_repo, [path], structured)
    day1 = only_manifest(seeded_repo)
    a, b, c_partial = day1.segments
    assert [(s.start, s.end) for s in day1.segments] == [(0, 2), (2, 4), (4, 6)]

    write(path, DAY1 + DAY2_TAIL)  # the file grew: task C went on
    chat, structured = llm(Step("segment", reply((1, "deploy compose to staging"))))
    report = do_ingest(seeded_repo, [path], structured)
    chat.assert_done()
    # only C was shown again, numbered from 1 (messages 5..7 of the session)
    assert len(window_numbers(chat.calls[0][1])) == 3
    assert "Deploy that compose file" in chat.calls[0][1][1]["content"]
    assert "read a CSV" not in chat.calls[0][1][1]["content"]
    day2 = only_manifest(seeded_repo)
    active = day2.active()
    assert [s.fingerprint for s in active[:2]] == [a.fingerprint, b.fingerprint]
    c_complete = active[2]
    assert (c_complete.start, c_complete.end) == (4, 7)
    assert c_complete.fingerprint != c_partial.fingerprint
    superseded = [s for s in day2.segments if s.status == "superseded"]
    assert [s.fingerprint for s in superseded] == [c_partial.fingerprint]
    assert report.files[0].outcome == "changed" and report.files[0].segmentation is not None
    assert report.files[0].segmentation.superseded == [c_partial.fingerprint]
    assert day2.status == "segmented" and day2.message_count == 7


def test_an_append_without_llm_waits_then_run_later_resegments(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = write(tmp_path / "file.jsonl", DAY1)
    _, structured = llm(Step("segment", reply((1, "csv"), (3, "compose"),
                                              (5, "deploy"))))
    do_ingest(seeded_repo, [path], structured)
    old_c = only_manifest(seeded_repo).segments[2]
    write(path, DAY1 + DAY2_TAIL)
    do_ingest(seeded_repo, [path], None)
    manifest = only_manifest(seeded_repo)
    assert manifest.status == "pending" and manifest.resume_from == 4
    assert [(s.start, s.end) for s in manifest.settled()] == [(0, 2), (2, 4)]
    assert len(manifest.active()) == 3  # the old C waits for the re-segmentation

    low = json.dumps({"task_type": "qa", **{n: {"score": 0.2, "reason": "meh"}
                                             for n in METRIC_NAMES}})
    chat = ScriptedChatModel([Step("segment", reply((1, "deploy, complete"))),
                              *(Step("score", low) for _ in range(3))])
    report = asyncio.run(run(seeded_repo, llm=LLMRuntime.fixed(chat)))
    chat.assert_done()
    assert len(window_numbers(chat.calls[0][1])) == 3  # messages 5..7 only
    assert report.superseded == [old_c.fingerprint] and report.trained == []
    manifest = only_manifest(seeded_repo)
    assert manifest.status == "labelled"
    assert [(s.start, s.end) for s in manifest.active()] == [(0, 2), (2, 4), (4, 7)]


def test_superseding_a_trained_segment_proposes_reverting_its_edits(
        seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = write(tmp_path / "file.jsonl", DAY1)
    _, structured = llm(Step("segment", reply((1, "csv"), (3, "compose"),
                                              (5, "deploy"))))
    do_ingest(seeded_repo, [path], structured)
    manifest = only_manifest(seeded_repo)
    c_partial = manifest.segments[2]
    uri = "expgit/trajectories:trajectories/00c0ffee00c0ffee.md"
    original = seeded_repo.snapshot().get("refund-method-rules")
    assert original is not None
    # what training C taught: one edit applied to main, one still open
    applied = propose(seeded_repo, GradientRequest(
        name="refund-method-rules", rationale="learned from the deploy session",
        content=edited("refund-method-rules", "\nCheck staging first.\n", seeded_repo),
        evidence=[uri]))
    apply_proposal(seeded_repo, merge(seeded_repo, [applied.id]).id)
    still_open = propose(seeded_repo, GradientRequest(
        name="flight-change-rules", rationale="also learned from it",
        content=edited("flight-change-rules", "\nOne more rule.\n", seeded_repo),
        evidence=[uri]))

    def trained(m: SessionManifest) -> None:
        for s in m.segments:
            if s.fingerprint == c_partial.fingerprint:
                s.trained, s.trajectory_uri, s.gradient_ids = True, uri, [applied.id]

    SessionStore(seeded_repo).patch({manifest.session_key: [trained]}, "test: trained")
    main_before = seeded_repo.main_commit()

    write(path, DAY1 + DAY2_TAIL)
    _, structured = llm(Step("segment", reply((1, "deploy, complete"))))
    report = do_ingest(seeded_repo, [path], structured)

    assert seeded_repo.main_commit() == main_before  # never a silent change of main
    [pid] = report.invalidation_proposals
    proposal = find_proposal(seeded_repo, pid)
    [change] = proposal.changes
    assert change.name == "refund-method-rules" and change.new_blob == original.blob
    assert "superseded" in proposal.description
    record = next(s for s in only_manifest(seeded_repo).segments
                  if s.fingerprint == c_partial.fingerprint)
    assert record.status == "superseded" and record.invalidation is not None
    assert record.invalidation.proposal_id == pid
    assert record.invalidation.reverted_gradient_ids == [applied.id]
    assert record.invalidation.open_gradient_ids == [still_open.id]
    # the invalidation gradient says which segment it invalidates
    log = git(tmp_path / "repo", "log", "-1", "--format=%B", proposal.gradient_commits[0])
    assert f"Expgit-Invalidates: {c_partial.fingerprint}" in log


def test_no_secret_of_the_corpus_reaches_git(seeded_repo: ExperienceRepository,
                                             tmp_path: Path) -> None:
    corpus = [json.loads(line) for line in
              (FIXTURES / "secrets" / "secrets.jsonl").read_text().splitlines() if line]
    rows: list[dict[str, Any]] = []
    for item in corpus:
        rows += [{"role": "user", "content": item["text"]},
                 {"role": "assistant", "content": f"Noted: {item['text']}"}]
    path = write(tmp_path / "leaky-session-name.jsonl", rows)
    _, structured = llm(Step("segment", reply((1, "credentials"))))
    report = do_ingest(seeded_repo, [path], structured)
    assert sum(report.redactions.values()) >= len(corpus)
    assert report.files[0].redactions == report.redactions
    repo_dir = tmp_path / "repo"
    history = git(repo_dir, "log", "-p", "--all")
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"],
                             cwd=repo_dir, capture_output=True, check=True).stdout
    secrets = [s for item in corpus for s in item["secrets"]]
    assert secrets
    for secret in [*secrets, str(path.resolve()), "leaky-session-name"]:
        assert secret not in history, secret
        assert secret.encode() not in objects, secret
    refs = git(repo_dir, "for-each-ref", "--format=%(refname)").split()
    for secret in secrets:
        proc = subprocess.run(["git", "grep", "-F", "-q", "-e", secret, *refs],
                              cwd=repo_dir)
        assert proc.returncode == 1, secret


def test_claude_code_session_id_is_stored_hashed(seeded_repo: ExperienceRepository,
                                                 tmp_path: Path) -> None:
    source = FIXTURES / "claude_code.jsonl"
    session_id = "9b2e4c1a-5d6f-4e7a-8b9c-0d1e2f3a4b5c"
    assert session_id in source.read_text()
    do_ingest(seeded_repo, [source], None, agent="claude")
    # the file's one sidechain row is a sub-agent's session of its own
    manifest, subagent = sorted(SessionStore(seeded_repo).manifests(),
                                key=lambda m: m.parent_session is not None)
    assert subagent.parent_session == manifest.session_key
    assert manifest.format == "claude_code" and manifest.session_id_hash is not None
    history = git(tmp_path / "repo", "log", "-p", "--all")
    assert session_id not in history and str(source.resolve()) not in history
