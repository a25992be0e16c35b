"""OutcomeStore: typed outcome records, append-only, on the ``[outcomes] branch``.

Each record is one file ``records/<sha256 of its idempotency key>.json`` on a branch of
its own (default ``expgit/outcomes``, an orphan history: never ``main``), written by
compare-and-swap through :class:`~expgit.store.sidebranch.SideBranch`. A file, once written, is
never rewritten or removed: the branch's history is the audit trail.

Idempotency: a repeat of a key with the same request returns the first record
(``created`` False) and writes nothing; the same key with a different request is a
ConflictError. Two writers racing on one key: the CAS loser finds the winner's file and
answers as a repeat.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

from pydantic import ValidationError

from expgit.core.redaction.text import redact_text
from expgit.errors import ConflictError, InvalidInputError, UsageError
from expgit.outcomes.records import (
    OutcomeRecord,
    OutcomeRequest,
    TargetKind,
    check_idempotency_key,
    key_digest,
)
from expgit.outcomes.targets import resolve_target
from expgit.store.format import trailers as tr
from expgit.store.repository import ExperienceRepository
from expgit.store.sidebranch import SideBranch

FOLDER = "records"
KIND_TRAILER = "outcome"
RECORD_ID_LEN = 16


class OutcomeStore:
    """Reads and appends outcome records on the outcomes branch of ``repo``."""

    def __init__(self, repo: ExperienceRepository) -> None:
        self.repo = repo
        self.branch = SideBranch(repo, repo.settings.outcomes.branch, what="outcomes")

    @staticmethod
    def path_of(idempotency_key: str) -> str:
        return f"{FOLDER}/{key_digest(idempotency_key)}.json"

    # ------------------------------------------------------------------ reads
    def get(self, idempotency_key: str) -> OutcomeRecord | None:
        """The record stored under ``idempotency_key``, None if there is none."""
        data = self.branch.read(self.path_of(check_key(idempotency_key)))
        return None if data is None else _parse(data, self.path_of(idempotency_key))

    def all(self) -> list[OutcomeRecord]:
        """Every record, oldest first (then by id)."""
        records = [_parse(data, f"{FOLDER}/{name}")
                   for name, data in self.branch.files(FOLDER, suffix=".json").items()]
        return sorted(records, key=lambda r: (r.created_at, r.id))

    def for_target(self, kind: TargetKind, target_id: str) -> list[OutcomeRecord]:
        """The records about one target (``target_id`` canonical, or as resolvable)."""
        wanted = {target_id.strip()}
        # A target deleted since (or never there): match the id as given.
        with contextlib.suppress(InvalidInputError, ConflictError):
            wanted.add(resolve_target(self.repo, kind, target_id))
        return [r for r in self.all() if r.target_kind == kind and r.target_id in wanted]

    def select(self, target_kind: TargetKind | None = None,
               target_id: str | None = None) -> list[OutcomeRecord]:
        """All records, those of one kind, or those of one target (id needs the kind)."""
        if target_id is not None:
            if target_kind is None:
                raise UsageError("a target id needs its target kind (target_kind, --target-kind)")
            return self.for_target(target_kind, target_id)
        return [r for r in self.all() if target_kind is None or r.target_kind == target_kind]

    # ----------------------------------------------------------------- writes
    def add(self, request: OutcomeRequest, idempotency_key: str, *,
            now: datetime | None = None) -> tuple[OutcomeRecord, bool]:
        """Store ``request`` under ``idempotency_key``; (record, True if newly created).

        Raises ConflictError (same key, different request; or the id names a target of
        another kind), NotFoundError (no such target), InvalidInputError (bad key)."""
        key = check_key(idempotency_key)
        digest = request.digest()
        existing = self.get(key)
        if existing is not None:
            return _repeat(existing, digest), False
        target_id = resolve_target(self.repo, request.target_kind, request.target_id)
        record = OutcomeRecord(
            id=key_digest(key)[:RECORD_ID_LEN], target_kind=request.target_kind,
            target_id=target_id, verdict=request.verdict, score=request.score,
            reason=redact_text(request.reason)[0],
            source=request.source, idempotency_key=key,
            request_digest=digest, created_at=now or datetime.now(UTC))
        path = self.path_of(key)
        data = (record.model_dump_json(indent=2) + "\n").encode("utf-8")

        def append(tip: str | None) -> dict[str, bytes | None]:
            return {} if self.branch.read(path, tip=tip) is not None else {path: data}

        commit = self.branch.write(
            append, f"outcome {record.verdict} on {record.target_kind} {record.id}",
            trailers=((tr.KIND, KIND_TRAILER),))
        if commit is None:  # another writer stored this key first
            winner = self.get(key)
            if winner is None:
                raise ConflictError(f"outcome {record.id} could not be stored",
                                    hint="submit it again with the same key")
            return _repeat(winner, digest), False
        return record, True


def check_key(idempotency_key: str) -> str:
    try:
        return check_idempotency_key(idempotency_key)
    except ValueError as exc:
        raise InvalidInputError(f"bad idempotency key: {exc}") from None


def _repeat(first: OutcomeRecord, digest: str) -> OutcomeRecord:
    if first.request_digest != digest:
        raise ConflictError(
            f"idempotency key already used for a different outcome (record {first.id})",
            hint="use a new key for a new outcome; repeat a request only unchanged")
    return first


def _parse(data: bytes, where: str) -> OutcomeRecord:
    try:
        return OutcomeRecord.model_validate_json(data)
    except ValidationError as exc:
        raise InvalidInputError(f"outcomes branch: {where} is not an outcome record "
                                f"({exc.error_count()} problems)") from None
