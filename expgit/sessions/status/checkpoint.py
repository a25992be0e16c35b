"""A status checkpoint that travels with the sessions branch: the
:class:`~expgit.sessions.status.ledger.Ledger` of one manifests folder, in the file
``status.json`` at the branch's root, so the first ``sessions status`` of a clone (or of
a CI runner's fresh checkout) moves that ledger forward by the manifests changed since,
instead of parsing every one of 100,000.

It is a cache, never the truth: the ledger names the folder tree it counts, which is in
the branch's own history, and is moved forward from there by a tree diff exactly as the
local one is (:func:`expgit.sessions.status.counts.sessions_status`). It is as trusted as the
branch it lives on (whoever can push it can push the manifests), checked for shape and
bounded in size before use; anything else is ignored and the sessions are counted.

Written by :func:`expgit.sessions.status.counts.refresh_checkpoint` (``sessions ingest`` and
``sessions run``, after their commit) once the folder holds :data:`EVERY` sessions and
has :data:`EVERY` changed manifests since the last checkpoint: one small commit that
changes no manifest, so every kept status stays valid.
"""

from __future__ import annotations

import json

from expgit.errors import GitError
from expgit.sessions.status.ledger import Ledger
from expgit.sessions.store import SessionStore

PATH = "status.json"
FORMAT = "sessions-status-checkpoint-2"  # 2: the ledger holds the skill usage
EVERY = 1000  # sessions, and changed manifests since the last checkpoint, before a new one
MAX_BYTES = 8 * 2 ** 20  # a larger checkpoint (a huge pending list) is neither written nor read


def read(store: SessionStore, *, tip: str | None = None) -> Ledger | None:
    """The checkpoint at the branch tip (or ``tip``), None if there is none usable."""
    try:
        data = store.branch.read(PATH, tip=tip)
    except GitError:
        return None
    if data is None or len(data) > MAX_BYTES:
        return None
    try:
        stored = json.loads(data)
    except ValueError:
        return None
    if not isinstance(stored, dict) or stored.get("format") != FORMAT:
        return None
    ledger = Ledger.from_cache(stored.get("ledger"))
    if ledger is None:
        return None
    status = ledger.status.model_copy(update={"branch": store.branch.branch})
    return ledger.model_copy(update={"status": status})


def encode(ledger: Ledger) -> bytes | None:
    """The checkpoint file for ``ledger``; None if it would be over :data:`MAX_BYTES`."""
    data = json.dumps({"format": FORMAT, "ledger": ledger.model_dump(mode="json")},
                      separators=(",", ":")).encode() + b"\n"
    return data if len(data) <= MAX_BYTES else None
