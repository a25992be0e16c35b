"""``expgit export-sft``: the labelled task segments as chat fine-tuning JSONL.

Selection: active (not superseded) segments with metrics, except those a pending
re-segmentation of their session may still replace; with no ``min_score``, the
ones the hub marked ``sft_eligible`` (``overall_score`` at least ``[sessions]
sft_threshold``); with ``min_score``, those whose ``overall_score`` reaches it. An
optional ``task_type`` must match. Best score first (ties: session, position), each
fingerprint once, at most ``limit``. Every example is redacted again (exports are never
written with a secret, whatever the store holds) and validated before the file is
written; a segment that makes no valid example (e.g. no assistant reply) is skipped and
counted, and so is an example over ``[sessions] sft_max_tokens`` estimated tokens
(``over_token_limit``).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from expgit.core.redaction.messages import redact_messages
from expgit.core.redaction.text import Redaction
from expgit.errors import InvalidInputError, NotFoundError
from expgit.sessions.manifest import SegmentRecord
from expgit.sessions.metrics import normalise_task_type
from expgit.sessions.sft import to_sft_example, write_sft_jsonl
from expgit.sessions.store import SessionStore
from expgit.store.format.experience import estimate_tokens
from expgit.store.repository import ExperienceRepository


class ExportReport(BaseModel):
    """What an export wrote and why other segments were left out."""

    out: str
    written: int = 0
    candidates: int = 0  # active, labelled segments
    threshold: float | None = None  # the min_score applied (None: sft_eligible)
    task_type: str | None = None
    skipped: dict[str, int] = Field(default_factory=dict)
    redactions: Redaction = Field(default_factory=Redaction)


def _selected(segment: SegmentRecord, min_score: float | None, task_type: str | None
              ) -> str | None:
    """Why ``segment`` is not exported (None: it is)."""
    metrics = segment.metrics
    assert metrics is not None
    if task_type is not None and metrics.task_type != task_type:
        return "other_task_type"
    if min_score is None:
        return None if segment.sft_eligible else "below_threshold"
    return None if metrics.overall_score >= min_score else "below_threshold"


def export_sft(repo: ExperienceRepository, *, task_type: str | None = None,
               min_score: float | None = None, limit: int | None = None,
               out: Path) -> ExportReport:
    """Write the selected segments to ``out`` (one example a line; see the module
    docstring). Nothing is written if any example is invalid."""
    if min_score is not None and not 0 <= min_score <= 1:
        raise InvalidInputError(f"--min-score {min_score} is not in [0, 1]")
    if limit is not None and limit < 0:
        raise InvalidInputError(f"--limit {limit} is negative")
    wanted_type = None if task_type is None else normalise_task_type(task_type)
    store = SessionStore(repo)
    skipped: Counter[str] = Counter()
    chosen: list[tuple[float, str, int, SegmentRecord]] = []
    seen: set[str] = set()
    candidates = 0
    for manifest in store.manifests():
        settled = {id(s) for s in manifest.settled()}
        for segment in manifest.segments:
            if segment.status != "active" or segment.metrics is None:
                continue
            candidates += 1
            reason = (_selected(segment, min_score, wanted_type) if id(segment) in settled
                      else "pending_resegmentation")
            if reason is None and segment.fingerprint in seen:
                reason = "duplicate"
            if reason is not None:
                skipped[reason] += 1
                continue
            seen.add(segment.fingerprint)
            chosen.append((-segment.metrics.overall_score, manifest.session_key,
                           segment.start, segment))
    chosen.sort(key=lambda item: item[:3])
    examples: list[dict[str, Any]] = []
    redactions: Counter[str] = Counter()
    max_tokens = repo.settings.sessions.sft_max_tokens
    for _, _, _, segment in chosen:
        if limit is not None and len(examples) >= limit:
            skipped["over_limit"] += 1
            continue
        try:
            messages, found = redact_messages(store.segment_messages(segment.fingerprint),
                                              repo.settings.limits.max_message_chars)
            example = to_sft_example(messages)
            if estimate_tokens(json.dumps(example, ensure_ascii=False)) > max_tokens:
                skipped["over_token_limit"] += 1
                continue
            examples.append(example)
        except NotFoundError:
            skipped["missing_messages"] += 1
            continue
        except InvalidInputError:
            skipped["not_a_chat_example"] += 1
            continue
        redactions.update(found)
    written = write_sft_jsonl(examples, out)
    return ExportReport(out=str(out), written=written, candidates=candidates,
                        threshold=min_score, task_type=wanted_type,
                        skipped=dict(sorted(skipped.items())),
                        redactions=Redaction.of(redactions))
