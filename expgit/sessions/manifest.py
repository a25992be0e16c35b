"""The session manifest: what expgit knows about one ingested session, as pydantic models.

One manifest per session, ``sessions/<session key>.json`` on the sessions branch. No
identifier is stored in the clear: the session key, the source path and the session id
are SHA-256 hashes (16 hex digits). Segments are message index ranges (0-based, ``end``
exclusive) with the fingerprint of their (redacted) messages; a superseded segment stays
in the manifest, for the audit trail and its invalidation.

Session status:

* ``pending``: some messages still need segmentation (``resume_from`` says from where;
  ``status_reason`` why it has not happened yet: no LLM, an invalid reply, ...);
* ``segmented``: every message is in an active segment, some are not labelled yet;
* ``labelled``: every active segment has its label: its trajectory metrics, or (a
  segment with feedback events) its feedback label.

``signals``: the session's feedback events and the response ids and times they need
(:mod:`expgit.sessions.formats.feedback`), by message index; None for a session file without
feedback rows. They are part of ``content_hash`` and of the fingerprint of each segment
with feedback, so feedback added later gives new segments, labelled again.

``skill_loads``: each load of an Agent Skill the session shows, ``{skill, at,
message_index, via}`` (:mod:`expgit.sessions.formats.skill_loads`), with ``started_at`` and
``ended_at``: what ``list --usage`` and ``status`` count (kept per manifest blob in the
sessions status ledger, so the counts cost what changed, not every session).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from expgit.outcomes.signals import SessionSignals
from expgit.sessions.formats.feedback import FeedbackLabel
from expgit.sessions.formats.skill_loads import SkillLoad
from expgit.sessions.metrics import SegmentMetrics

SessionStatus = Literal["pending", "segmented", "labelled"]
SegmentStatus = Literal["active", "superseded"]
MANIFEST_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InvalidationRecord(_Model):
    """What superseding a trained segment did: the invalidation proposal (reverting the
    edits its gradients made on main), and the gradients it could not handle."""

    proposal_id: str | None = None
    reverted_gradient_ids: list[str] = Field(default_factory=list)
    open_gradient_ids: list[str] = Field(default_factory=list)  # not on main: reject them
    notes: list[str] = Field(default_factory=list)


class SegmentRecord(_Model):
    """One task segment of a session: messages ``start`` .. ``end - 1`` (0-based)."""

    start: int = Field(ge=0)
    end: int = Field(ge=1)
    fingerprint: str
    topic: str
    status: SegmentStatus = "active"
    metrics: SegmentMetrics | None = None
    feedback: FeedbackLabel | None = None  # instead of metrics: labelled by its feedback
    memory_eligible: bool = False
    sft_eligible: bool = False
    trained: bool = False
    trajectory_uri: str | None = None  # the evidence its gradients cite
    gradient_ids: list[str] = Field(default_factory=list)
    proposal_ids: list[str] = Field(default_factory=list)
    last_error: str | None = None
    invalidation: InvalidationRecord | None = None
    agent_model: str | None = None  # the model that wrote most of its assistant messages

    @property
    def labelled(self) -> bool:
        return self.metrics is not None or self.feedback is not None

    @property
    def messages(self) -> int:
        return self.end - self.start


class ModelSpan(_Model):
    """From message ``start`` (0-based) on, assistant messages were written by ``model``
    (until the next span)."""

    start: int = Field(ge=0)
    model: str


def model_spans(models: list[str | None]) -> list[ModelSpan]:
    """The spans of a session's per-message models (None: not an assistant message, or
    not known; it changes nothing)."""
    spans: list[ModelSpan] = []
    for index, model in enumerate(models):
        if model is not None and (not spans or spans[-1].model != model):
            spans.append(ModelSpan(start=index, model=model))
    return spans


class SessionManifest(_Model):
    version: int = MANIFEST_VERSION
    session_key: str  # hash of the session id, else of the source path
    source_hash: str  # hash of the source file's absolute path
    session_id_hash: str | None = None
    agent: str | None = None
    format: str
    message_count: int = Field(ge=0)
    content_hash: str  # fingerprint of all the (redacted) messages and the signals
    status: SessionStatus = "pending"
    status_reason: str | None = None
    resume_from: int | None = Field(default=None, ge=0)  # pending: segmentation from here
    invalid_lines: int = 0  # of the last ingest
    redactions: dict[str, int] = Field(default_factory=dict)  # of the last ingest
    segments: list[SegmentRecord] = Field(default_factory=list)
    signals: SessionSignals | None = None  # feedback events, redacted, response ids hashed
    models: list[ModelSpan] = Field(default_factory=list)  # the agent's model(s)
    # a sub-agent's session (Claude Code): the key of the session whose Task call
    # started it, that call's id when known, and the sub-agent's id (hashed); it is one
    # segment, as the sub-agent did the one task it was given
    parent_session: str | None = None
    parent_tool_id: str | None = None
    agent_id_hash: str | None = None
    subagents: dict[str, str] = Field(default_factory=dict)  # Task call id -> session key
    # the source file's size and modification time (ns) when it was last read: a file
    # found again with both unchanged is not read (``sessions ingest --from``)
    source_size: int | None = None
    source_mtime_ns: int | None = None
    # the skills the agent loaded (:mod:`expgit.sessions.formats.skill_loads`), and the times
    # of its first and last message (None: its log has no times)
    skill_loads: list[SkillLoad] = Field(default_factory=list)
    started_at: datetime | None = None
    ended_at: datetime | None = None

    def loads_in(self, start: int, end: int) -> list[SkillLoad]:
        """The skill loads made by messages ``start`` .. ``end - 1``."""
        return [load for load in self.skill_loads if start <= load.message_index < end]

    def model_of(self, start: int, end: int) -> str | None:
        """The model whose span covers most of messages ``start`` .. ``end - 1``."""
        cover: dict[str, int] = {}
        for span, following in zip(self.models, [*self.models[1:], None], strict=True):
            until = following.start if following is not None else end
            overlap = min(end, until) - max(start, span.start)
            if overlap > 0:
                cover[span.model] = cover.get(span.model, 0) + overlap
        return max(cover, key=lambda m: cover[m]) if cover else None

    def active(self) -> list[SegmentRecord]:
        return sorted((s for s in self.segments if s.status == "active"),
                      key=lambda s: s.start)

    def settled(self) -> list[SegmentRecord]:
        """The active segments that no pending re-segmentation can still replace."""
        limit = self.resume_from
        return [s for s in self.active() if limit is None or s.end <= limit]

    def refresh_status(self) -> None:
        """``status`` from ``resume_from`` and the segments' labels (and each active
        segment's ``agent_model`` from ``models``)."""
        for segment in self.segments:
            if segment.status == "active" and self.models:
                segment.agent_model = self.model_of(segment.start, segment.end)
        if self.resume_from is not None and self.resume_from < self.message_count:
            self.status = "pending"
            return
        self.resume_from = None
        self.status_reason = None
        active = self.active()
        self.status = "labelled" if active and all(s.labelled for s in active) \
            else "segmented"
