"""``/v1/outcomes`` for ``expgit serve``: submit and list typed outcome records.

* ``POST /v1/outcomes`` — body :class:`~expgit.outcomes.records.OutcomeRequest`, header
  ``Idempotency-Key`` required (missing: 400). ``201`` with the new record; ``200`` with
  the first record for a repeat of the same key and body (header
  ``Idempotent-Replayed: true``); ``404`` no such target; ``409`` the id names a target
  of another kind, or the key was used with a different body; ``422`` a bad body or key.
* ``GET /v1/outcomes?target_kind=K&target_id=ID`` — ``{"outcomes": [...]}``, all records
  or those of one target (``target_id`` needs ``target_kind``).

Outcomes are analytics only: they are stored on the outcomes branch, never on ``main``,
and no agent-facing endpoint returns them. Errors are ``{"error": "..."}`` once
:func:`expgit.asgi.guards.install_guards` is installed on the app (it also does auth).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header, Query, Response
from pydantic import BaseModel, ConfigDict

from expgit.errors import UsageError
from expgit.outcomes.records import OutcomeRecord, OutcomeRequest, TargetKind
from expgit.outcomes.store import OutcomeStore
from expgit.store.repository import ExperienceRepository

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"


class OutcomeList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    outcomes: list[OutcomeRecord]


def add_outcome(repo_path: Path, request: OutcomeRequest, idempotency_key: str | None
                ) -> tuple[OutcomeRecord, bool]:
    """Open the repository and add one outcome; UsageError without a key."""
    if idempotency_key is None or not idempotency_key.strip():
        raise UsageError(f"the {IDEMPOTENCY_HEADER} header is required",
                         hint="send a unique key per outcome, e.g. a UUID; repeat it "
                              "unchanged to retry safely")
    store = OutcomeStore(ExperienceRepository.open(repo_path))
    return store.add(request, idempotency_key.strip())


def list_outcomes(repo_path: Path, target_kind: TargetKind | None,
                  target_id: str | None) -> list[OutcomeRecord]:
    """All records, those of one kind, or those of one target."""
    return OutcomeStore(ExperienceRepository.open(repo_path)).select(target_kind, target_id)


def outcomes_router(repo_path: Path) -> APIRouter:
    """The ``/v1/outcomes`` routes on the repository at ``repo_path``."""
    router = APIRouter(tags=["outcomes"])

    @router.post("/v1/outcomes", response_model=OutcomeRecord, status_code=201,
                 responses={200: {"model": OutcomeRecord, "description": "a repeat"}})
    async def post_outcome(
        body: OutcomeRequest, response: Response,
        idempotency_key: Annotated[str | None, Header(alias=IDEMPOTENCY_HEADER)] = None,
    ) -> OutcomeRecord:
        record, created = await asyncio.to_thread(add_outcome, repo_path, body,
                                                  idempotency_key)
        if not created:
            response.status_code = 200
            response.headers[REPLAYED_HEADER] = "true"
        return record

    @router.get("/v1/outcomes", response_model=OutcomeList)
    async def get_outcomes(
        target_kind: Annotated[TargetKind | None, Query()] = None,
        target_id: Annotated[str | None, Query(max_length=300)] = None,
    ) -> OutcomeList:
        records = await asyncio.to_thread(list_outcomes, repo_path, target_kind, target_id)
        return OutcomeList(outcomes=records)

    return router
