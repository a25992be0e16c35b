"""``expgit sessions ingest``: session files parsed, redacted, recorded on the sessions
branch and (with a segmenter) segmented, incrementally.

Per file: parse (bad lines reported, never fatal), redact every message before anything
else sees it, then compare with the session's manifest:

* unchanged (same fingerprint of all messages, same agent and format): nothing to do -
  no LLM call, no commit;
* new: segmented from the first message (a session of at most two messages is one
  segment at once; without a segmenter the session is ``pending``);
* changed (grew, or edited): re-segmented from the last segment's start or the first
  changed message (:mod:`expgit.sessions.incremental`); superseded segments that were
  trained get an invalidation proposal (:mod:`expgit.sessions.invalidate`);
* only its feedback changed (:mod:`expgit.sessions.feedback`): no re-segmentation; each
  segment whose feedback changed is superseded by a new record of the same messages (to
  be labelled and trained again; invalidated as above if it was trained).

An empty file (no message, or only metadata rows such as a `summary`) is skipped and
listed in `empty`, never stored. Each message text and tool output is first cut to
`[limits] max_message_chars` (head and tail kept).

All files of one call are committed together, in one commit on the sessions branch.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from expgit.llm.structured import StructuredLLM
from expgit.sessions.discovery import with_subagent_files
from expgit.sessions.feedback import redact_signals
from expgit.sessions.fingerprint import fingerprint, hash_id
from expgit.sessions.formats import ParsedSession, SessionFormat, parse_session_file
from expgit.sessions.incremental import (
    Resegmented,
    apply_segmentation,
    first_change,
    refingerprint,
    resume_point,
)
from expgit.sessions.invalidate import invalidate_segments
from expgit.sessions.manifest import SessionManifest, model_spans
from expgit.sessions.segmenter import (
    SHORT_SESSION,
    LLMTaskSegmenter,
    Segmentation,
    Span,
    TaskSegmenter,
    topic_of,
)
from expgit.sessions.store import SessionChanges, SessionStore
from expgit.store.repository import ExperienceRepository
from expgit.train.domain import Message
from expgit.train.redaction import document_names, redact_messages

NO_LLM = "not segmented yet: `expgit sessions run` segments it (with an LLM)"


class SegmentOutcome(BaseModel):
    """What segmenting one session did."""

    segments: int = 0  # active segments afterwards
    added: list[str] = Field(default_factory=list)  # fingerprints
    kept: int = 0
    superseded: list[str] = Field(default_factory=list)
    invalidation_proposals: list[str] = Field(default_factory=list)
    llm_prompts: int = 0
    pending_reason: str | None = None


class FileReport(BaseModel):
    file: str  # as given on the command line (never stored)
    session: str  # the session key (a hash)
    parent_session: str | None = None  # a sub-agent's session: its parent's key
    format: str
    outcome: Literal["new", "unchanged", "changed", "empty"]  # empty: skipped, not stored
    messages: int
    lines: int
    blank_lines: int
    invalid_lines: list[int] = Field(default_factory=list)
    skipped_metadata: int = 0
    redactions: dict[str, int] = Field(default_factory=dict)
    status: str
    status_reason: str | None = None
    segmentation: SegmentOutcome | None = None


class IngestReport(BaseModel):
    files: list[FileReport] = Field(default_factory=list)
    commit: str | None = None  # on the sessions branch; None: nothing changed
    branch: str
    redactions: dict[str, int] = Field(default_factory=dict)
    invalid_lines: int = 0
    empty: list[str] = Field(default_factory=list)  # files with no message: never stored
    invalidation_proposals: list[str] = Field(default_factory=list)


async def segment_session(repo: ExperienceRepository, manifest: SessionManifest,
                          messages: Sequence[Message], start: int,
                          segmenter: TaskSegmenter | None, changes: SessionChanges
                          ) -> SegmentOutcome:
    """Segment ``messages`` from ``start`` on into ``manifest`` (in place), put the new
    segments' messages into ``changes``, and invalidate what superseded trained segments
    taught. Without a segmenter, a session longer than two messages stays pending."""
    short = start == 0 and (len(messages) <= SHORT_SESSION
                            or manifest.parent_session is not None)  # a sub-agent's task
    if segmenter is None and not short and start < len(messages):
        manifest.resume_from, manifest.status_reason = start, NO_LLM
        return SegmentOutcome(segments=len(manifest.settled()), pending_reason=NO_LLM)
    if segmenter is None or short or start >= len(messages):  # no LLM needed
        result = Segmentation(spans=[Span(0, len(messages), topic_of(messages))]
                              if short and messages else [])
    else:
        result = await segmenter.segment(messages, start)
    change = apply_segmentation(manifest, messages, start, result)
    outcome = SegmentOutcome(llm_prompts=result.calls, pending_reason=result.reason)
    await settle(repo, manifest, change, changes, outcome)
    return outcome


async def settle(repo: ExperienceRepository, manifest: SessionManifest, change: Resegmented,
                 changes: SessionChanges, outcome: SegmentOutcome) -> None:
    """Record ``change`` of ``manifest``'s segments: the new segments' messages into
    ``changes``, the counts into ``outcome``, and the invalidation of what superseded
    trained segments taught."""
    changes.segments.update(change.added)
    outcome.segments = len(manifest.active())
    outcome.added += list(change.added)
    outcome.kept += change.kept
    outcome.superseded += [s.fingerprint for s in change.superseded]
    trained = [s for s in change.superseded if s.trained]
    if trained:
        record = await asyncio.to_thread(invalidate_segments, repo, trained)
        if record is not None:
            for segment in trained:
                segment.invalidation = record
            if record.proposal_id:
                outcome.invalidation_proposals.append(record.proposal_id)


def session_key(path: Path, session_id: str | None, agent_id: str | None = None) -> str:
    """A session's key: the hash of its session id, else of its file's absolute path;
    a sub-agent's: of that and its agent id."""
    base = f"session:{session_id}" if session_id else str(path.resolve())
    return hash_id(f"{base}/agent:{agent_id}" if agent_id is not None else base)


@dataclass
class SessionUnit:
    """One session a file holds: the file's own, or one of its sub-agents'."""

    path: Path
    parsed: ParsedSession
    key: str
    parent: str | None = None  # a sub-agent's: its parent session's key
    subagents: dict[str, str] = field(default_factory=dict)  # Task call id -> key


def session_units(path: Path, parsed: ParsedSession) -> list[SessionUnit]:
    """The sessions of a parsed file: its own (unless it only holds sub-agents, as a
    ``subagents/agent-*.jsonl`` file does) and each sub-agent's."""
    key = session_key(path, parsed.session_id)
    subs = [SessionUnit(path, sub, session_key(path, sub.session_id, sub.agent_id),
                        parent=key) for sub in parsed.subagents]
    links = {tool: session_key(path, parsed.session_id, agent)
             for tool, agent in parsed.task_agents.items()}
    links.update({u.parsed.parent_tool_id: u.key for u in subs if u.parsed.parent_tool_id})
    own = [] if subs and not parsed.messages else [
        SessionUnit(path, parsed, key, subagents=dict(sorted(links.items())))]
    return own + subs


async def ingest(repo: ExperienceRepository, files: Sequence[Path], *,
                 agent: str | None = None, llm: StructuredLLM | None = None,
                 segmenter: TaskSegmenter | None = None,
                 session_format: SessionFormat = "auto") -> IngestReport:
    """Ingest session files (see the module docstring); one commit for all of them, or
    none when nothing changed. The segmenter: ``segmenter``, else the LLM one on
    ``llm``; with neither, sessions that need the LLM stay pending (``expgit sessions
    run`` segments them). Every file is parsed before anything is written."""
    if segmenter is None and llm is not None:
        segmenter = LLMTaskSegmenter(llm, repo.settings.sessions.window_tokens, repo)
    store = SessionStore(repo)
    report = IngestReport(branch=store.branch.branch)
    changes = SessionChanges()
    total: Counter[str] = Counter()
    files = with_subagent_files(files)
    parsed_files = [(path, await asyncio.to_thread(parse_session_file, path, session_format))
                    for path in files]  # a missing or unreadable file: nothing written
    units = [unit for path, parsed in parsed_files for unit in session_units(path, parsed)]
    for unit in units:
        path, parsed, key = unit.path, unit.parsed, unit.key
        messages, counts = redact_messages(parsed.messages,
                                           repo.settings.limits.max_message_chars)
        signals, found = redact_signals(parsed.signals, document_names(parsed.messages))
        counts.update(found)
        total.update(counts)
        if not messages:  # an empty file, or only metadata rows: nothing to keep
            report.files.append(FileReport(
                file=str(path), session=key, format=parsed.format, outcome="empty",
                messages=0, lines=parsed.line_count, blank_lines=parsed.blank_lines,
                invalid_lines=parsed.invalid_lines, skipped_metadata=parsed.skipped_metadata,
                status="skipped", status_reason="no messages: nothing stored"))
            report.empty.append(str(path))
            report.invalid_lines += len(parsed.invalid_lines)
            continue
        manifest = changes.manifests.get(key)  # the same session twice in one call
        base = (changes.bases.get(key) if manifest is not None
                else await asyncio.to_thread(store.manifest_bytes, key))
        if manifest is None and base is not None:
            manifest = SessionManifest.model_validate_json(base)
        content = fingerprint(messages, signals)
        models = model_spans(parsed.message_models)
        file = FileReport(
            file=str(path), session=key, parent_session=unit.parent,
            format=parsed.format, outcome="unchanged",
            messages=len(messages), lines=parsed.line_count, blank_lines=parsed.blank_lines,
            invalid_lines=parsed.invalid_lines, skipped_metadata=parsed.skipped_metadata,
            redactions=dict(sorted(counts.items())), status="")
        report.files.append(file)
        report.invalid_lines += len(parsed.invalid_lines)
        if manifest is not None and manifest.content_hash == content:
            if (manifest.agent != (agent or manifest.agent) or manifest.format != parsed.format
                    or manifest.models != models or manifest.subagents != unit.subagents):
                file.outcome = "changed"  # the same messages: no new segmentation
                changes.put(manifest, base)
                manifest.agent, manifest.format = agent or manifest.agent, parsed.format
                manifest.models, manifest.subagents = models, unit.subagents
            file.status, file.status_reason = manifest.status, manifest.status_reason
            continue
        if manifest is None:
            file.outcome, start = "new", 0
            manifest = SessionManifest(
                session_key=key, source_hash=hash_id(str(path.resolve())),
                session_id_hash=hash_id(parsed.session_id) if parsed.session_id else None,
                agent=agent, format=parsed.format, message_count=len(messages),
                content_hash=content, signals=signals, parent_session=unit.parent,
                parent_tool_id=parsed.parent_tool_id,
                agent_id_hash=hash_id(parsed.agent_id) if parsed.agent_id else None)
            renewed, only_feedback = None, False
        else:
            file.outcome = "changed"
            old = changes.transcripts.get(key)
            if old is None:
                old = await asyncio.to_thread(store.transcript, key)
            only_feedback = old == messages  # the segments stand: no re-segmentation
            start = (len(messages) if only_feedback
                     else resume_point(manifest, first_change(old, messages)))
            manifest.agent, manifest.format = agent or manifest.agent, parsed.format
            renewed = None
            if manifest.signals != signals:  # segments before start: relabel if need be
                manifest.signals = signals
                renewed = refingerprint(manifest, messages, before=start)
        manifest.message_count, manifest.content_hash = len(messages), content
        manifest.models, manifest.subagents = models, unit.subagents
        manifest.parent_tool_id = manifest.parent_tool_id or parsed.parent_tool_id
        manifest.invalid_lines = len(parsed.invalid_lines)
        manifest.redactions = dict(sorted(counts.items()))
        changes.put(manifest, base)
        changes.transcripts[key] = messages
        if not only_feedback:
            file.segmentation = await segment_session(repo, manifest, messages, start,
                                                      segmenter, changes)
        else:
            file.segmentation = SegmentOutcome(segments=len(manifest.active()))
        if renewed is not None:
            await settle(repo, manifest, renewed, changes, file.segmentation)
        report.invalidation_proposals += file.segmentation.invalidation_proposals
        manifest.refresh_status()
        file.status, file.status_reason = manifest.status, manifest.status_reason
    report.redactions = dict(sorted(total.items()))
    subject = f"sessions: ingest {len(files)} file{'s' if len(files) != 1 else ''}"
    report.commit = await asyncio.to_thread(store.save, changes, subject)
    return report
