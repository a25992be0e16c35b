"""``expgit sessions ingest``: session files parsed, redacted, recorded on the sessions
branch and (with a segmenter) segmented, incrementally.

Per file: parse (bad lines reported, never fatal), redact every message before anything
else sees it, then compare with the session's manifest:

* unchanged (same fingerprint of all messages, same agent and format): nothing to do -
  no LLM call, no commit;
* new: segmented from the first message (a session of at most two messages is one
  segment at once; without a segmenter the session is ``pending``);
* changed (grew, or edited): re-segmented from the last segment's start or the first
  changed message (:mod:`expgit.sessions.ingest.incremental`); superseded segments that were
  trained get an invalidation proposal (:mod:`expgit.sessions.ingest.invalidate`);
* only its skill loads or times are new to its manifest (one ingested before they were
  recorded): the manifest gets them, nothing else changes;
* only its feedback changed (:mod:`expgit.sessions.formats.feedback`): no re-segmentation; each
  segment whose feedback changed is superseded by a new record of the same messages (to
  be labelled and trained again; invalidated as above if it was trained).

An empty file (no message, or only metadata rows such as a `summary`) is skipped and
listed in `empty`, never stored. A path that is not a regular file (a named pipe, a
socket, a device) is never opened for reading: it is reported as ``not_regular`` and
skipped. Each message text and tool output is first cut to
`[limits] max_message_chars` (head and tail kept).

All files of one call are committed together, in one commit on the sessions branch.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from expgit.core.domain import Message
from expgit.core.redaction.messages import document_names, redact_messages
from expgit.errors import InvalidInputError, NotRegularFileError
from expgit.llm.structured import StructuredLLM
from expgit.sessions.fingerprint import fingerprint, hash_id
from expgit.sessions.formats.feedback import redact_signals
from expgit.sessions.formats.parse import FORMATS, ParsedSession, SessionFormat
from expgit.sessions.formats.skill_loads import SkillLoad
from expgit.sessions.ingest.discovery import with_subagent_files
from expgit.sessions.ingest.incremental import (
    Resegmented,
    apply_segmentation,
    first_change,
    refingerprint,
    resume_point,
)
from expgit.sessions.ingest.invalidate import invalidate_segments
from expgit.sessions.ingest.report import (
    FileReport,
    IngestReport,
    SegmentOutcome,
    SessionUnit,
    SourceFile,
    left_out,
    not_regular,
    read_source,
    session_units,
)
from expgit.sessions.ingest.segmenter import (
    SHORT_SESSION,
    LLMTaskSegmenter,
    Segmentation,
    Span,
    TaskSegmenter,
    topic_of,
)
from expgit.sessions.manifest import SessionManifest, model_spans
from expgit.sessions.status.counts import refresh_checkpoint
from expgit.sessions.store import SessionChanges, SessionStore
from expgit.store.derived.catalog import catalog
from expgit.store.repository import ExperienceRepository

NO_LLM = "not segmented yet: `expgit sessions run` segments it (with an LLM)"


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


def skill_names(repo: ExperienceRepository) -> frozenset[str | None]:
    """The names of the experiences on main: the skills a load can name."""
    return frozenset(row.name for row in catalog(repo).rows)


def _timed(session: SessionManifest | ParsedSession
           ) -> tuple[list[SkillLoad], datetime | None, datetime | None]:
    return session.skill_loads, session.started_at, session.ended_at


def _set_timed(manifest: SessionManifest, parsed: ParsedSession) -> None:
    """``manifest`` given the skill loads and time span of its ``parsed`` file."""
    manifest.skill_loads = list(parsed.skill_loads)
    manifest.started_at, manifest.ended_at = parsed.started_at, parsed.ended_at


def manifest_stat(manifest: SessionManifest) -> tuple[int, int] | None:
    """The (size, mtime_ns) of its source file that a manifest recorded."""
    if manifest.source_size is None or manifest.source_mtime_ns is None:
        return None
    return manifest.source_size, manifest.source_mtime_ns


async def ingest(repo: ExperienceRepository, files: Sequence[Path], *,
                 agent: str | None = None, llm: StructuredLLM | None = None,
                 segmenter: TaskSegmenter | None = None,
                 session_format: SessionFormat = "auto", discovered: bool = False
                 ) -> IngestReport:
    """Ingest session files (see the module docstring); one commit for all of them, or
    none when nothing changed. The segmenter: ``segmenter``, else the LLM one on
    ``llm``; with neither, sessions that need the LLM stay pending (``expgit sessions
    run`` segments them). Every file is parsed before anything is written.

    A file of no known format is an InvalidInputError (nothing written); a last line
    still being written is left out. ``discovered``: the files were found by ``--from``
    (their sub-agent files among them): such a file is skipped and reported instead
    (``unrecognized``), and one still being written is left for the next ingest
    (``incomplete``)."""
    if segmenter is None and llm is not None:
        segmenter = LLMTaskSegmenter(llm, repo.settings.sessions.window_tokens, repo)
    store = SessionStore(repo)
    report = IngestReport(branch=store.branch.branch)
    changes = SessionChanges()
    total: Counter[str] = Counter()
    sources: list[SourceFile] = []
    for path in files if discovered else with_subagent_files(files):
        try:
            sources.append(await asyncio.to_thread(read_source, path, session_format))
        except NotRegularFileError as exc:  # a named pipe would block: never read
            report.files.append(not_regular(path, exc.kind))
    units: list[SessionUnit] = []  # a missing or unreadable file: nothing written
    for source in sources:
        if source.parsed.unrecognized is not None and not discovered:
            what = ("no known session format" if session_format == "auto"
                    else f"no row of the {session_format} format")
            raise InvalidInputError(
                f"session file {source.path}: {what}: {source.parsed.unrecognized}",
                hint="rows of: " + ", ".join(FORMATS))
        skipped = left_out(source, discovered)
        if skipped is not None:
            report.files.append(skipped)
            listed = report.unrecognized if skipped.outcome == "unrecognized" \
                else report.incomplete
            listed.append(skipped.file)
            continue
        for unit in session_units(source.path, source.parsed):
            unit.stat = source.stat
            units.append(unit)
    known: frozenset[str | None] | None = None  # the names on main, read once if needed
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
            redactions=dict(sorted(counts.items())), status="",
            truncated_line=parsed.truncated_line)
        report.files.append(file)
        report.invalid_lines += len(parsed.invalid_lines)
        if parsed.skill_loads:
            known = known if known is not None else skill_names(repo)
            file.skill_loads = len(parsed.skill_loads)
            file.unknown_skill_loads = sum(1 for load in parsed.skill_loads
                                           if load.skill not in known)
            file.failed_skill_loads = sum(1 for load in parsed.skill_loads if load.failed)
            report.skill_loads += file.skill_loads
            report.unknown_skill_loads += file.unknown_skill_loads
            report.failed_skill_loads += file.failed_skill_loads
        if manifest is not None and manifest.content_hash == content:
            if (manifest.agent != (agent or manifest.agent) or manifest.format != parsed.format
                    or manifest.models != models or manifest.subagents != unit.subagents
                    or _timed(manifest) != _timed(parsed)):
                file.outcome = "changed"  # the same messages: no new segmentation
                changes.put(manifest, base)
                manifest.agent, manifest.format = agent or manifest.agent, parsed.format
                manifest.models, manifest.subagents = models, unit.subagents
                _set_timed(manifest, parsed)
            if unit.stat is not None and unit.stat != manifest_stat(manifest):
                changes.put(manifest, base)  # touched, the same messages: note it
                manifest.source_size, manifest.source_mtime_ns = unit.stat
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
        _set_timed(manifest, parsed)
        if unit.stat is not None:
            manifest.source_size, manifest.source_mtime_ns = unit.stat
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
    if report.commit is not None:
        await asyncio.to_thread(refresh_checkpoint, repo)
    return report
