"""Which experiences were in the agent's context for one rollout.

An executor records them in ``rollout.metadata["experiences_used"]`` as a list of
``{"name": <experience name>, "blob": <blob id of the file it showed>, "reason": <why it
was shown>, "score": <its BM25 score, or null>}``: the blob pins the version the agent
saw; the reason is ``always-on`` or ``rank N (bm25 score X)``
(:mod:`expgit.retrieval.context`), or in listing mode ``loaded with the Skill tool``
(:mod:`expgit.train.components.tool_executor`). The trajectory analyzer copies that
list into the stored trajectory's front matter, and the per-experience statistics read
it back from there.

Readers are lenient about what other executors (remote environments, older recordings)
wrote: a plain list of names is accepted (no blob), anything unreadable is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue

KEY = "experiences_used"


class UsedExperience(BaseModel):
    """One experience in the agent's context: its name and, when known, its blob id."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    blob: str | None = None
    reason: str | None = None
    score: float | None = None

    def record(self) -> dict[str, JsonValue]:
        record: dict[str, JsonValue] = {"name": self.name, "blob": self.blob}
        if self.reason is not None:
            record |= {"reason": self.reason, "score": self.score}
        return record


def read_usage(metadata: Mapping[str, Any] | None) -> list[UsedExperience]:
    """The experiences a rollout's (or a trajectory front matter's) ``experiences_used``
    names, in the order recorded, each name once; [] when absent or unreadable."""
    raw = (metadata or {}).get(KEY)
    if not isinstance(raw, list):
        return []
    used: dict[str, UsedExperience] = {}
    for item in raw:
        if isinstance(item, str) and item.strip():
            entry = UsedExperience(name=item.strip())
        elif isinstance(item, Mapping) and isinstance(item.get("name"), str) \
                and item["name"].strip():
            blob, reason, score = item.get("blob"), item.get("reason"), item.get("score")
            entry = UsedExperience(
                name=item["name"].strip(), blob=blob if isinstance(blob, str) and blob else None,
                reason=reason if isinstance(reason, str) and reason else None,
                score=float(score) if isinstance(score, int | float)
                and not isinstance(score, bool) else None)
        else:
            continue
        used.setdefault(entry.name, entry)
    return list(used.values())


def usage_records(used: list[UsedExperience]) -> list[JsonValue]:
    """The JSON/YAML form of a usage list (what ``experiences_used`` holds)."""
    return [u.record() for u in used]
