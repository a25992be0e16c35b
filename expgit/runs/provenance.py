"""A run's provenance (:mod:`expgit.store.format.provenance`): which agent model it ran, which
trainer model and endpoint it called; and the warning ``eval`` gives when it measures a
proposal with another agent model than the one the proposal was made and measured with.

The agent is the runtime's own model, unless the rollouts come from elsewhere: an
environment service (the model its ``/health`` names) or a file of recorded rollouts
(the model their ``metadata`` names as ``agent_model`` or ``model``, when they agree).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from expgit.core.domain import Rollout
from expgit.llm.provenance import endpoint_host
from expgit.remote.protocol import Health
from expgit.store.format import trailers as tr
from expgit.store.format.provenance import UNKNOWN, Provenance, of_message
from expgit.store.repository import ExperienceRepository

if TYPE_CHECKING:
    from expgit.llm.factory import LLMRuntime

# how far back from a head the proposal it edits is looked for (a reviewer's commits)
MAX_EDITS = 20


def service_agent(health: Health) -> str:
    """The model an environment service runs its agent with, as its /health says."""
    described = str(health.metadata.get("agent_model") or health.metadata.get("llm") or "")
    model = described.split(" at ", 1)[0].removeprefix("local ").strip()
    return model or f"{UNKNOWN} ({health.service})"


def recorded_agent(rollouts: Sequence[Rollout]) -> str:
    """The agent model recorded rollouts name in their metadata, if they all agree."""
    names: set[Any] = {r.metadata.get("agent_model") or r.metadata.get("model")
                       for r in rollouts}
    if len(names) == 1 and (name := names.pop()):
        return str(name)
    return f"{UNKNOWN} (recorded rollouts)"


def of_runtime(runtime: LLMRuntime | None, agent_model: str | None = None, *,
               service_url: str | None = None) -> Provenance:
    """The run's provenance; no runtime: an eval run by an environment service."""
    if runtime is None:
        return Provenance(agent_model=agent_model or UNKNOWN, trainer_model="none",
                          endpoint=endpoint_host(service_url))
    return runtime.provenance(agent_model)


@runtime_checkable
class TellsProvenance(Protocol):
    """LLM handles that can tell the run's models (an LLMRuntime can)."""

    def provenance(self, agent_model: str | None = None) -> Provenance: ...


def of_handles(llm: object, agent_model: str) -> Provenance | None:
    """The provenance of LLM handles that can tell it (:class:`TellsProvenance`; a test's
    fake handles cannot: None, no trailers)."""
    return llm.provenance(agent_model) if isinstance(llm, TellsProvenance) else None


def proposal_provenance(repo: ExperienceRepository, commit: str) -> tuple[str, Provenance
                                                                          ] | None:
    """The nearest commit from ``commit`` back along first parents (a reviewer's edits
    on top of a proposal, at most MAX_EDITS) whose trailers name the models, and those;
    not looked for on ``main``'s history (what is applied is no proposal any more)."""
    main = repo.git.ref(repo.main_ref)
    sha: str | None = commit
    for _ in range(MAX_EDITS + 1):
        if sha is None or (main is not None and repo.git.is_ancestor(sha, main)):
            return None
        info = repo.git.read_commit(sha)
        found = of_message(tr.parse_message(info.message))
        if found is not None:
            return sha, found
        sha = info.parents[0] if info.parents else None
    return None


def agent_warnings(repo: ExperienceRepository, commits: Sequence[str | None],
                   run: Provenance) -> list[str]:
    """One warning per evaluated revision made with another agent model than ``run``'s."""
    warnings = []
    for commit in commits:
        found = proposal_provenance(repo, commit) if commit is not None else None
        if found is None or found[1].agent_model == run.agent_model:
            continue
        sha, made = found
        warnings.append(
            f"{sha[:12]} was made and measured with the agent model {made.agent_model}, "
            f"this eval runs {run.agent_model}: lessons learned on one model transfer "
            "poorly to another")
    return warnings
