"""Trigger evals: does the listing agent load a skill for the queries it should, and only
for those? In the format of the Agent Skills guide to optimising descriptions.

A skill's ``evals/triggers.json`` (in its folder, read from the commit evaluated) is a
JSON array of ``{"query": TEXT, "should_trigger": true|false}``. Each query runs
``runs`` times as the first user message of the listing agent (the system prompt of
listing mode: the always-on skills and the ``<available_skills>`` listing; tools: only
``Skill``). A run *triggers* when the agent calls ``Skill`` with the skill's name; it
stops there, or when the agent answers without a tool call, or after ``max_steps``
turns (a ``Skill`` call of another skill returns that skill, and the agent goes on).

Per query, as the guide's script writes it: ``{query, should_trigger, triggers, runs,
trigger_rate}``; it passes when the rate is above ``threshold`` (0.5) for a query that
should trigger, and not above it for one that should not. Overall: the trigger rate
over every run, recall (the runs of should-trigger queries that triggered), the false
trigger rate (the runs of should-not queries that triggered) and precision (of all
triggering runs, those of should-trigger queries).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field

from expgit.core.jsonl import loads_untrusted
from expgit.errors import InvalidInputError
from expgit.llm.port import ToolMessages
from expgit.llm.structured import StructuredLLM
from expgit.retrieval.skill_listing import ListingMode
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format.templates import render_prompt
from expgit.store.repository import ExperienceRepository
from expgit.train.components.tool_executor import run_tool_call
from expgit.train.context import gather_bounded
from expgit.train.reports.run_report import UsageReport
from expgit.train.tools.environment import StateEnvironment
from expgit.train.tools.skill_tool import SKILL_TOOL, SkillToolEnvironment

TRIGGERS_FILE = "evals/triggers.json"
THRESHOLD = 0.5
MAX_QUERIES = 200
MAX_QUERY_CHARS = 8000


class TriggerQuery(BaseModel):
    """One query of a trigger eval file (the guide's shape, nothing else)."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    should_trigger: bool


class TriggerResult(BaseModel):
    query: str
    should_trigger: bool
    triggers: int
    runs: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def trigger_rate(self) -> float:
        return self.triggers / self.runs if self.runs else 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return (self.trigger_rate > THRESHOLD) == self.should_trigger


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 6) if whole else None


class TriggerReport(BaseModel):
    """``expgit eval --skill NAME --triggers``: per query and overall."""

    skill: str
    file: str
    commit: str
    runs: int
    threshold: float = THRESHOLD
    results: list[TriggerResult]
    usage: UsageReport = Field(default_factory=UsageReport)

    def _runs(self, should: bool) -> tuple[int, int]:
        chosen = [r for r in self.results if r.should_trigger == should]
        return sum(r.triggers for r in chosen), sum(r.runs for r in chosen)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def trigger_rate(self) -> float | None:
        return _rate(sum(r.triggers for r in self.results),
                     sum(r.runs for r in self.results))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def recall(self) -> float | None:
        """Of the runs of should-trigger queries, those that triggered."""
        return _rate(*self._runs(True))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def false_trigger_rate(self) -> float | None:
        """Of the runs of should-not-trigger queries, those that triggered."""
        return _rate(*self._runs(False))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def precision(self) -> float | None:
        """Of the runs that triggered, those of should-trigger queries."""
        hit, _ = self._runs(True)
        return _rate(hit, hit + self._runs(False)[0])

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> int:
        return sum(1 for r in self.results if r.passed)

    def lines(self) -> list[str]:
        def pct(value: float | None) -> str:
            return "n/a" if value is None else f"{value * 100:.0f}%"
        lines = [f"trigger eval of {self.skill} ({self.file} at {self.commit[:12]}), "
                 f"{self.runs} run{'s' if self.runs != 1 else ''} per query:"]
        for r in self.results:
            want = "should trigger" if r.should_trigger else "should not trigger"
            shown = r.query if len(r.query) <= 70 else r.query[:67] + "..."
            lines.append(f"  {'pass' if r.passed else 'FAIL'}  {r.triggers}/{r.runs} "
                         f"({pct(r.trigger_rate)})  {want}: {shown}")
        lines.append(f"queries passed: {self.passed}/{len(self.results)} (threshold "
                     f"{self.threshold}); trigger rate {pct(self.trigger_rate)}; "
                     f"should trigger: {pct(self.recall)} triggered (recall); should not "
                     f"trigger: {pct(self.false_trigger_rate)} triggered; precision "
                     f"{pct(self.precision)}")
        return lines


def load_triggers(repo: ExperienceRepository, commit: str, skill: str
                  ) -> tuple[str, list[TriggerQuery]]:
    """(path, queries) of the skill's trigger file at ``commit``; InvalidInputError
    (exit 5) naming the file, and the query, when it is missing or malformed."""
    path = f"{repo.layout.unit_of(skill)}/{TRIGGERS_FILE}"
    tree = repo.git.read_commit(commit).tree
    entry = repo.git.path_entry(tree, path)
    if entry is None or entry.is_tree:
        raise InvalidInputError(f"{path}: no trigger eval file at {commit[:12]}",
                                hint='add a JSON array of {"query": ..., '
                                '"should_trigger": true|false} there')
    try:
        raw = loads_untrusted(repo.git.read_blob(entry.sha))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{path}: not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(raw, list) or not raw:
        raise InvalidInputError(f"{path}: must be a non-empty JSON array of "
                                '{"query": ..., "should_trigger": true|false}')
    if len(raw) > MAX_QUERIES:
        raise InvalidInputError(f"{path}: {len(raw)} queries, more than {MAX_QUERIES}")
    queries = []
    for i, item in enumerate(raw):
        try:
            queries.append(TriggerQuery.model_validate(item))
        except ValidationError as exc:
            problem = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'query'}: {e['msg']}"
                                for e in exc.errors()[:3])
            raise InvalidInputError(f"{path}: query {i}: {problem}") from None
    return path, queries


async def triggered(llm: StructuredLLM, repo: ExperienceRepository, snapshot: Snapshot,
                    mode: ListingMode, skill: str, query: str, max_steps: int) -> bool:
    """One run of ``query``: whether the listing agent called Skill with ``skill``."""
    listing = mode.listing(snapshot)
    env = SkillToolEnvironment(StateEnvironment([], {}), {
        n: (s.location, s.body) for n, s in listing.skills.items()})
    system, _ = render_prompt("tool_rollout", repo, experiences=listing.always, case=None,
                              now=None, instructions=None, listing=listing.text)
    schemas = env.tool_schemas()
    known = {SKILL_TOOL}
    chat: ToolMessages = [{"role": "system", "content": system},
                          {"role": "user", "content": query}]
    for _ in range(max_steps):
        turn = await llm.tools("rollout", chat, schemas)
        if any(c.name == SKILL_TOOL and _named(c.arguments) == skill for c in turn.tool_calls):
            return True
        if not turn.tool_calls:
            return False
        chat.append({"role": "assistant", "content": turn.text or None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name,
                                                          "arguments": c.arguments}}
            for c in turn.tool_calls]})
        for call in turn.tool_calls:
            part = await asyncio.to_thread(run_tool_call, env, known, call)
            chat.append({"role": "tool", "tool_call_id": call.id,
                         "content": part.tool_output or ""})
    return False


def _named(arguments: str) -> str | None:
    try:
        value = loads_untrusted(arguments or "{}")
    except ValueError:
        return None
    skill = value.get("skill") if isinstance(value, dict) else None
    return skill if isinstance(skill, str) else None


async def run_triggers(llm: StructuredLLM, repo: ExperienceRepository, snapshot: Snapshot,
                       mode: ListingMode, skill: str, path: str,
                       queries: Sequence[TriggerQuery], *, runs: int, concurrency: int,
                       max_steps: int) -> TriggerReport:
    """Every query ``runs`` times, at most ``concurrency`` runs at once."""
    fired = await gather_bounded(concurrency, (
        triggered(llm, repo, snapshot, mode, skill, q.query, max_steps)
        for q in queries for _ in range(runs)))
    counts = [fired[i:i + runs] for i in range(0, len(fired), runs)]
    return TriggerReport(skill=skill, file=path, commit=snapshot.commit, runs=runs,
                         results=[TriggerResult(query=q.query,
                                                should_trigger=q.should_trigger,
                                                triggers=sum(c), runs=runs)
                                  for q, c in zip(queries, counts, strict=True)])
