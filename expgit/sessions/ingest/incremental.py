"""Incremental segmentation: where a changed session must be segmented again, and how a
new segmentation replaces the old segments (the trajectory hub's Day 1 / Day 2 rule).

A session that grew is re-segmented from its last segment's start (the last task may
have gone on), or from the first changed message if that is earlier (from the start of
the segment holding it). Segments wholly before that point are kept as they are. Of
the new segments, one whose fingerprint an old segment had keeps that old record (its
metrics, training); an old segment whose fingerprint is gone is ``superseded``.

A segment's fingerprint covers its feedback (:mod:`expgit.sessions.formats.feedback`): when only
the feedback of a session changed, :func:`refingerprint` gives the segments whose
feedback changed a new record over the same messages (no re-segmentation, no LLM call)
and supersedes the old one, so it is labelled and trained again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from expgit.core.domain import Message
from expgit.sessions.fingerprint import fingerprint
from expgit.sessions.formats.feedback import segment_signals
from expgit.sessions.ingest.segmenter import Segmentation
from expgit.sessions.manifest import SegmentRecord, SessionManifest


def first_change(old: Sequence[Message], new: Sequence[Message]) -> int:
    """The index of the first message that differs (the shorter length if one list is a
    prefix of the other)."""
    for index, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return index
    return min(len(old), len(new))


def resume_point(manifest: SessionManifest, changed: int) -> int:
    """Where segmentation must start again after the messages changed from ``changed``
    on: the start of the segment holding min(``changed``, the last segment's start, an
    earlier pending resume point)."""
    active = manifest.active()
    point = changed
    if active:
        point = min(point, active[-1].start)
    if manifest.resume_from is not None:
        point = min(point, manifest.resume_from)
    return next((s.start for s in active if s.end > point), point)


@dataclass
class Resegmented:
    """What :func:`apply_segmentation` changed: the segments it superseded, and the
    messages of the segments it added (to store by fingerprint)."""

    superseded: list[SegmentRecord] = field(default_factory=list)
    added: dict[str, list[Message]] = field(default_factory=dict)
    kept: int = 0  # new segments whose fingerprint an old one had (no new work)


def apply_segmentation(manifest: SessionManifest, messages: Sequence[Message], start: int,
                       result: Segmentation) -> Resegmented:
    """Replace ``manifest``'s segments from ``start`` on with ``result`` (in place).

    Old active segments from ``start`` on that ``result`` decided (they begin before the
    point it stopped at) and whose fingerprint did not come back are superseded; those
    beyond that point stay active and wait (``manifest.resume_from``)."""
    change = Resegmented()
    decided_to = result.resume if result.resume is not None else len(messages)
    old = [s for s in manifest.active() if s.end > start]
    by_fingerprint = {s.fingerprint: s for s in old}
    reused: set[int] = set()
    records: list[SegmentRecord] = []
    for span in result.spans:
        part = list(messages[span.start:span.end])
        fp = fingerprint(part, segment_signals(manifest.signals, span.start, span.end))
        match = by_fingerprint.get(fp)
        if match is not None and id(match) not in reused:
            reused.add(id(match))
            match.start, match.end = span.start, span.end
            records.append(match)
            change.kept += 1
            continue
        records.append(SegmentRecord(start=span.start, end=span.end, fingerprint=fp,
                                     topic=span.topic))
        change.added[fp] = part
    for segment in old:
        if id(segment) in reused:
            continue
        if segment.start < decided_to:
            segment.status = "superseded"
            change.superseded.append(segment)
    waiting = [s for s in old if id(s) not in reused and s.status == "active"]
    kept_before = [s for s in manifest.segments if s.status == "active" and s.end <= start]
    superseded = [s for s in manifest.segments if s.status == "superseded"]
    manifest.segments = kept_before + records + waiting + superseded
    manifest.resume_from = result.resume
    manifest.status_reason = result.reason
    return change


def refingerprint(manifest: SessionManifest, messages: Sequence[Message],
                  before: int | None = None) -> Resegmented:
    """Fingerprint ``manifest``'s active segments (those ending at or before ``before``,
    or all) again with its current ``signals`` (in place): one whose fingerprint changed
    is superseded by a new, unlabelled record of the same span and topic."""
    change = Resegmented()
    renewed: list[SegmentRecord] = []
    for segment in manifest.segments:
        if segment.status != "active" or (before is not None and segment.end > before):
            renewed.append(segment)
            continue
        part = list(messages[segment.start:segment.end])
        fp = fingerprint(part, segment_signals(manifest.signals, segment.start, segment.end))
        if fp == segment.fingerprint:
            renewed.append(segment)
            continue
        renewed.append(SegmentRecord(start=segment.start, end=segment.end, fingerprint=fp,
                                     topic=segment.topic))
        change.added[fp] = part
        segment.status = "superseded"
        change.superseded.append(segment)
    manifest.segments = ([s for s in renewed if s.status == "active"]
                         + [s for s in renewed if s.status == "superseded"]
                         + change.superseded)
    return change
