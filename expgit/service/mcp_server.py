"""``expgit mcp``: the experiences of ``main`` for an agent, as an MCP server over stdio.

Built on the official ``mcp`` Python SDK (its ``MCPServer``, the former FastMCP). Tools:

* ``search_experiences(query, top_k?, token_budget?)``: what an agent should read for a
  request, :func:`expgit.retrieval.context.context_for` on ``main`` (the JSON of
  ``expgit context --json`` plus its ``markdown``);
* ``get_experience(name)``: one experience's file on ``main`` (as ``expgit show --json``);
* ``report_outcome(target_kind, target, verdict, reason, idempotency_key, score?)``: an
  outcome about a rollout, trajectory, experience or proposal, written through the same
  idempotent store as ``expgit outcomes add`` (a repeat with the same key returns the
  first record, ``created`` false). Without a score: 1 for helpful/pass, 0 for
  harmful/fail, 0.5 for neutral.

Resources: ``experience://{name}``, one for each experience on ``main`` (its file, listed
by ``resources/list``), and ``experience://index``, the listing as JSON.

Every request reads the tip of ``main`` afresh. Nothing here writes to ``main``: the only
write is an outcome, on the outcomes branch. A request with bad arguments (an unknown
experience, a negative top-k, an unknown target) is answered with a JSON-RPC error
(invalid params) and the server keeps serving.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types import Resource as MCPResource

from expgit import __version__
from expgit.errors import ExpgitError
from expgit.outcomes.records import OutcomeRequest, TargetKind, Verdict
from expgit.outcomes.store import OutcomeStore
from expgit.retrieval.context import context_for
from expgit.store.derived.catalog import catalog
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.history import show_experience

T = TypeVar("T")
SCHEME = "experience://"
INDEX_URI = f"{SCHEME}index"
_DEFAULT_SCORES = {"helpful": 1.0, "pass": 1.0, "harmful": 0.0, "fail": 0.0, "neutral": 0.5}
INSTRUCTIONS = (
    "The experiences (lessons and rules) this agent has learned, kept in git. Before you "
    "act on a request, call search_experiences with it and follow what it returns. After "
    "the task, report_outcome says whether an experience helped or harmed.")


def _answer(work: Callable[[], T]) -> T:
    """``work()``, an expgit error turned into a JSON-RPC invalid-params error."""
    try:
        return work()
    except ExpgitError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        raise MCPError(INVALID_PARAMS, f"{exc.message}{hint}") from None


class ExperienceServer(MCPServer[Any]):
    """The MCP server of one experience repository (see the module docstring)."""

    def __init__(self, repo_path: Path) -> None:
        super().__init__(name="expgit", version=__version__, instructions=INSTRUCTIONS)
        self.repo_path = repo_path
        self._register()

    def repo(self) -> ExperienceRepository:
        """The repository, opened afresh: its settings and ``main`` as they are now."""
        return ExperienceRepository.open(self.repo_path)

    async def list_resources(self) -> list[MCPResource]:
        listed = await super().list_resources()
        rows = _answer(lambda: catalog(self.repo(), None).rows)
        return listed + [MCPResource(uri=f"{SCHEME}{row.name}", name=row.name,
                                     description=row.summary or None,
                                     mime_type="text/markdown") for row in rows]

    def _register(self) -> None:
        @self.tool()
        def search_experiences(query: str, top_k: int | None = None,
                               token_budget: int | None = None) -> dict[str, Any]:
            """The experiences to read for a request (always-on first, then the most
            relevant that fit the token budget), each with why it was chosen, and the
            whole as markdown for a system prompt."""
            selection = _answer(lambda: context_for(self.repo(), query, top_k=top_k,
                                                    token_budget=token_budget))
            return selection.as_json() | {"markdown": selection.markdown()}

        @self.tool()
        def get_experience(name: str) -> dict[str, Any]:
            """One experience's file on main: front matter and body, version, blob."""
            return dataclasses.asdict(_answer(lambda: show_experience(self.repo(), name)))

        @self.tool()
        def report_outcome(target_kind: TargetKind, target: str, verdict: Verdict,
                           idempotency_key: str, reason: str = "",
                           score: float | None = None) -> dict[str, Any]:
            """Record whether an experience (by name) or a rollout (by id), trajectory or
            proposal helped; the same idempotency_key again records nothing new."""
            return _answer(lambda: self._report(target_kind, target, verdict,
                                                idempotency_key, reason, score))

        @self.resource(INDEX_URI, name="index", mime_type="application/json",
                       description="The experiences on main: name, status, version, "
                                   "summary.")
        def index() -> str:
            listed = _answer(lambda: catalog(self.repo(), None))
            return json.dumps({"commit": listed.commit,
                               "experiences": [row.as_dict() for row in listed.rows]})

        @self.resource(f"{SCHEME}{{name}}", name="experience", mime_type="text/markdown",
                       description="One experience's file on main.")
        def experience(name: str) -> str:
            return _answer(lambda: show_experience(self.repo(), name)).content

    def _report(self, target_kind: TargetKind, target: str, verdict: Verdict, key: str,
                reason: str, score: float | None) -> dict[str, Any]:
        from pydantic import ValidationError

        if not key.strip():
            raise MCPError(INVALID_PARAMS, "idempotency_key must not be empty")
        try:
            request = OutcomeRequest(
                target_kind=target_kind, target_id=target, verdict=verdict,
                score=_DEFAULT_SCORES[verdict] if score is None else score, reason=reason,
                source="mcp")
        except ValidationError as exc:
            first = exc.errors()[0]
            raise MCPError(INVALID_PARAMS, f"{first['loc'][0]}: {first['msg']}") from None
        record, created = OutcomeStore(self.repo()).add(request, key.strip())
        return {"created": created, "outcome": record.model_dump(mode="json")}


def serve_mcp(repo_path: Path) -> None:
    """Serve the repository at ``repo_path`` over stdio until the client hangs up."""
    ExperienceServer(repo_path).run("stdio")
