"""Typed outcome records: a verdict on one rollout, trajectory, experience or proposal.

An outcome is analytics only: it is kept on the ``[outcomes] branch`` (never on ``main``)
and never shown in an agent-facing response. Fields other modules rely on (the stats and
learning report): ``target_kind``, ``target_id``, ``verdict``, ``score``, ``source``,
``created_at``.

Canonical target ids (what ``target_id`` holds once stored):

* ``rollout``: the rollout's content id, 16 hex digits (``trajectory_store.rollout_id``);
* ``trajectory``: the trajectory URI ``<trajectories branch>:trajectories/<ab>/<id>.md``;
* ``experience``: the experience name on ``main``;
* ``proposal``: the proposal id, 12 hex digits (a unique prefix is accepted on input).

Verdicts: ``helpful`` / ``pass`` count as positive, ``harmful`` / ``fail`` as negative,
``neutral`` as neither (:func:`polarity`).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

TargetKind = Literal["rollout", "trajectory", "experience", "proposal"]
Verdict = Literal["helpful", "harmful", "neutral", "pass", "fail"]
TARGET_KINDS: tuple[TargetKind, ...] = ("rollout", "trajectory", "experience", "proposal")
VERDICTS: tuple[Verdict, ...] = ("helpful", "harmful", "neutral", "pass", "fail")

KEY_MAX = 200
REASON_MAX = 2000
SOURCE_MAX = 100
TARGET_ID_MAX = 300


def polarity(verdict: Verdict) -> int:
    """+1 for helpful / pass, -1 for harmful / fail, 0 for neutral."""
    return 1 if verdict in ("helpful", "pass") else -1 if verdict in ("harmful", "fail") else 0


def check_idempotency_key(key: str) -> str:
    """The key if it is 1..200 visible ASCII characters (no spaces), else ValueError."""
    if not key or len(key) > KEY_MAX or any(not 33 <= ord(c) <= 126 for c in key):
        raise ValueError(f"an idempotency key is 1 to {KEY_MAX} visible ASCII characters "
                         "without spaces (a UUID, for instance)")
    return key


def key_digest(key: str) -> str:
    """SHA-256 hex of an idempotency key: the record's file name on the branch."""
    return hashlib.sha256(key.encode("ascii")).hexdigest()


class OutcomeRequest(BaseModel):
    """What a caller submits (``POST /v1/outcomes`` body, ``expgit outcomes add``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target_kind: TargetKind
    target_id: str = Field(min_length=1, max_length=TARGET_ID_MAX)
    verdict: Verdict
    score: float = Field(ge=0, le=1)
    reason: str = Field(default="", max_length=REASON_MAX)
    source: str = Field(default="api", min_length=1, max_length=SOURCE_MAX)

    @field_validator("target_id", "source")
    @classmethod
    def _one_line(cls, value: str) -> str:
        text = value.strip()
        if not text or "\n" in text or "\r" in text:
            raise ValueError("must be a single non-empty line")
        return text

    def digest(self) -> str:
        """SHA-256 of the canonical JSON of the request: equal payloads, equal digests."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True,
                               separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class OutcomeRecord(BaseModel):
    """One stored outcome (``records/<sha256 of the idempotency key>.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str  # first 16 hex digits of the key digest
    target_kind: TargetKind
    target_id: str  # canonical (see the module docstring)
    verdict: Verdict
    score: float = Field(ge=0, le=1)
    reason: str = ""
    source: str
    idempotency_key: str
    request_digest: str  # OutcomeRequest.digest() of the first submission
    created_at: datetime

    @property
    def polarity(self) -> int:
        return polarity(self.verdict)
