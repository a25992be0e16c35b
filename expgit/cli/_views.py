"""JSON views of library objects, shared by the read commands.

The convention (docs/json-output.md): every ``--json`` document is one object; a field
that names a proposal or a gradient holds its 12-hex id; ``commit`` and the other commit
fields hold full 40-hex object ids; times are whole seconds since the epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from expgit.cli._common import epoch
from expgit.store.workflow.gradients import Gradient
from expgit.store.workflow.proposals import Proposal

if TYPE_CHECKING:  # a plain listing never loads the sessions
    from expgit.sessions.status.skill_usage import SkillUsage

ID_LENGTH = 12


def gradient_view(g: Gradient) -> dict[str, Any]:
    added, removed = g.change.counts
    return {"id": g.id, "commit": g.commit, "state": g.state, "target": g.target,
            "operation": g.operation, "base_commit": g.parent,
            "base_version": g.base_version, "base_blob": g.base_blob,
            "confidence": g.confidence, "rationale": g.rationale, "evidence": g.evidence,
            "added": added, "removed": removed, "author": g.author, "time": g.time,
            "branch": g.ref.removeprefix("refs/heads/")}


def proposal_view(p: Proposal) -> dict[str, Any]:
    return {"id": p.id, "commit": p.commit, "state": p.state, "base": p.base,
            "subject": p.subject,
            "gradients": [sha[:ID_LENGTH] for sha in p.gradient_commits],
            "gradient_commits": list(p.gradient_commits), "author": p.author,
            "time": p.time, "branch": p.ref.removeprefix("refs/heads/"),
            "changes": [{"experience": c.name, "operation": c.operation,
                         "added": c.counts[0], "removed": c.counts[1]} for c in p.changes]}



def usage_view(u: SkillUsage) -> dict[str, Any]:
    """A skill's loads in the ingested sessions (``list --usage``, ``status``)."""
    return {"loads_30d": u.loads_30d, "last_load": epoch(u.last_load), "loads": u.loads}

