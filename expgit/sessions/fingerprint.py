"""Content fingerprints and hashed identifiers (SHA-256, 16 hex characters).

A segment's fingerprint is the hash of the canonical JSON of its normalised messages
(:func:`canonical_json`: keys sorted, no insignificant whitespace, UTF-8 kept), so it
covers roles, texts and tool calls with their inputs and outputs (and the feedback on
them, when there is any); the same messages give the same fingerprint in any process.
Identifiers (session ids, user ids, source paths) are stored only as :func:`hash_id`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from pydantic import BaseModel

from expgit.core.domain import Message

HASH_CHARS = 16


def canonical_json(obj: object) -> str:
    """``obj`` (JSON data or pydantic models, also nested in lists) as canonical JSON."""
    return json.dumps(_plain(obj), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False)


def _plain(obj: object) -> object:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, list | tuple):
        return [_plain(item) for item in obj]
    if isinstance(obj, dict):
        return {str(key): _plain(value) for key, value in obj.items()}
    return obj


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_CHARS]


def fingerprint(messages: Sequence[Message], signals: BaseModel | None = None) -> str:
    """The fingerprint of a segment: SHA-256 (16 hex) of its messages' canonical JSON;
    with feedback ``signals``, of ``{"messages", "signals"}`` (so the fingerprint of
    messages without feedback is what it always was)."""
    if signals is None:
        return _sha(canonical_json(list(messages)))
    return _sha(canonical_json({"messages": list(messages), "signals": signals}))


def hash_id(value: str) -> str:
    """An identifier as stored: SHA-256 (16 hex) of ``value``."""
    return _sha(value)
