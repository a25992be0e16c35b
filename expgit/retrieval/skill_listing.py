"""The listing of skills an agent sees, as Claude Code and Codex show it, within a budget.

In ``[agent] skills = "listing"`` the tool-calling agent's system prompt holds the
always-on skills (``expgit-always: "true"``) in full and, for every other active skill,
one entry of an ``<available_skills>`` block in the form of the reference library's
``to-prompt`` (skills-ref)::

    <available_skills>
    <skill>
    <name>
    fix-flaky-tests
    </name>
    <description>
    Use when a test passes and fails on reruns without a code change.
    </description>
    <location>
    skills/fix-flaky-tests/SKILL.md
    </location>
    </skill>
    </available_skills>

The name and description are HTML-escaped; the location is the SKILL.md's path in the
repository. The agent loads a skill's body only by calling the ``Skill`` tool
(:mod:`expgit.train.tools.skill_tool`).

The budget (Claude Code's rule): each description is cut at ``description_chars``
characters; if the block is still over ``budget_tokens`` estimated tokens, skills lose
their description from the last one backwards (name and location kept: still loadable);
and if that is not enough, skills are left out from the last one backwards (``omitted``).
Skills are listed by name.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass

from expgit.core.domain import Rollout
from expgit.errors import InvalidInputError, UsageError
from expgit.retrieval.context import ALWAYS_ON, ContextItem, select_context
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format.experience import estimate_tokens
from expgit.store.format.settings import Settings

# Claude Code: the listing gets 1% of the context window, each description 1,536 chars
CLAUDE_CODE_PERCENT = 1.0
CLAUDE_CODE_DESCRIPTION_CHARS = 1536
# Codex: about 2% of the context window, or 8,000 characters
CODEX_PERCENT = 2.0
CODEX_CHARS = 8000
_ELLIPSIS = "…"


@dataclass(frozen=True)
class ListedSkill:
    """One active skill the agent may load: what the listing shows, and its body."""

    name: str
    description: str
    location: str
    body: str
    blob: str

    def entry(self, description: str | None) -> str:
        """Its ``<skill>`` element, with ``description`` (None: the whole one)."""
        shown = self.description if description is None else description
        return "\n".join(["<skill>", "<name>", html.escape(self.name), "</name>",
                          "<description>", html.escape(shown), "</description>",
                          "<location>", self.location, "</location>", "</skill>"])


@dataclass(frozen=True)
class SkillListing:
    """The always-on skills, the listing block, and every skill the ``Skill`` tool can
    load (the listed ones and any left out of the listing for the budget)."""

    always: list[ContextItem]
    skills: dict[str, ListedSkill]
    listed: list[str]
    omitted: list[str]
    cut: list[str]  # listed skills whose description was shortened or dropped
    text: str
    budget_tokens: int

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)


def _block(entries: list[str]) -> str:
    return "\n".join(["<available_skills>", *entries, "</available_skills>"])


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:max(limit - 1, 0)].rstrip() + _ELLIPSIS


def active_skills(snapshot: Snapshot) -> tuple[list[ListedSkill], list[ListedSkill]]:
    """(always-on, others) of the snapshot's active, valid skills, by name."""
    always: list[ListedSkill] = []
    others: list[ListedSkill] = []
    for name in snapshot.names():
        entry = snapshot.entries[name]
        try:
            exp = entry.experience
        except InvalidInputError:
            continue
        if exp.status != "active":
            continue
        skill = ListedSkill(name, exp.front_matter.summary, entry.path, exp.body, entry.blob)
        (always if exp.front_matter.always else others).append(skill)
    return always, others


def fit_listing(skills: list[ListedSkill], budget_tokens: int, description_chars: int
                ) -> tuple[str, list[str], list[str], list[str]]:
    """(block, listed, cut, omitted) of ``skills`` within the budget (module docstring)."""
    shown = [_cut(s.description, description_chars) for s in skills]
    cut = {s.name for s, d in zip(skills, shown, strict=True) if d != s.description}

    def size(count: int) -> int:
        return estimate_tokens(_block([s.entry(d) for s, d in
                                       zip(skills[:count], shown[:count], strict=True)]))

    for i in range(len(skills) - 1, -1, -1):
        if size(len(skills)) <= budget_tokens:
            break
        if shown[i]:
            shown[i] = ""
            cut.add(skills[i].name)
    count = len(skills)
    while count and size(count) > budget_tokens:
        count -= 1
    listed = [s.name for s in skills[:count]]
    text = _block([s.entry(d) for s, d in zip(skills[:count], shown[:count], strict=True)])
    return (text, listed, sorted(cut & set(listed)),
            [s.name for s in skills[count:]])


def build_listing(snapshot: Snapshot, *, budget_tokens: int, description_chars: int,
                  always_token_budget: int | None = None) -> SkillListing:
    """The listing of ``snapshot`` for one rollout. The always-on block is
    :func:`~expgit.retrieval.context.select_context`'s (the same refusal past
    ``always_token_budget``)."""
    selection = select_context(snapshot, "", token_budget=always_token_budget, top_k=0)
    always_items = [i for i in selection.items if i.reason == ALWAYS_ON]
    _, others = active_skills(snapshot)
    text, listed, cut, omitted = fit_listing(others, budget_tokens, description_chars)
    return SkillListing(always=always_items, skills={s.name: s for s in others},
                        listed=listed, omitted=omitted, cut=cut, text=text,
                        budget_tokens=budget_tokens)


@dataclass(frozen=True)
class ListingMode:
    """Listing mode's budgets: the listing's (estimated tokens, description cut) and the
    always-on block's (the ``[context]`` token budget)."""

    budget_tokens: int
    description_chars: int
    always_token_budget: int | None = None

    @classmethod
    def of(cls, settings: Settings, token_budget: int | None = None) -> ListingMode | None:
        """The tool-calling agent's listing mode from ``[agent]``; None: retrieval."""
        if not settings.skill_listing():
            return None
        return cls(settings.agent.listing_budget_tokens,
                   settings.agent.listing_description_chars,
                   token_budget or settings.context.token_budget)

    def listing(self, snapshot: Snapshot) -> SkillListing:
        return build_listing(snapshot, budget_tokens=self.budget_tokens,
                             description_chars=self.description_chars,
                             always_token_budget=self.always_token_budget)


def reflect_view(rollout: Rollout, snapshot: Snapshot, settings: Settings
                 ) -> dict[str, object] | None:
    """What the reflect prompts show of a listing-mode run: the listing it saw (rebuilt
    from its snapshot with the same budgets), the skills listed and those loaded; None
    for a run of retrieval mode."""
    mode = ListingMode.of(settings)
    if rollout.skills_loaded is None or mode is None:
        return None
    try:
        text = mode.listing(snapshot).text
    except (InvalidInputError, UsageError):
        text = ""
    return {"listing": text, "listed": list(rollout.skills_listed or []),
            "loaded": list(rollout.skills_loaded),
            "not_loaded": [n for n in rollout.skills_listed or []
                           if n not in rollout.skills_loaded]}


def listing_budget(snapshot: Snapshot, settings: Settings) -> dict[str, int] | None:
    """What the merge prompt is told of the listing in listing mode: its budget and its
    size now (every listed skill with its whole description), in estimated tokens, and
    the count of skills; None in retrieval mode."""
    mode = ListingMode.of(settings)
    if mode is None:
        return None
    _, others = active_skills(snapshot)
    full = _block([s.entry(_cut(s.description, mode.description_chars)) for s in others])
    return {"budget_tokens": mode.budget_tokens, "tokens": estimate_tokens(full),
            "skills": len(others)}


@dataclass(frozen=True)
class BudgetCheck:
    """The listing against one agent's budget."""

    agent: str
    rule: str
    chars: int  # the listing's characters with that agent's description cut
    tokens: int
    limit_chars: int | None
    limit_tokens: int | None

    @property
    def over(self) -> bool:
        return ((self.limit_tokens is not None and self.tokens > self.limit_tokens)
                or (self.limit_chars is not None and self.chars > self.limit_chars))

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "over": self.over}


def budget_checks(snapshot: Snapshot, context_window_tokens: int) -> list[BudgetCheck]:
    """The listing of ``snapshot`` (every active, not always-on skill, uncut by any
    budget) against Claude Code's and Codex's budgets for a context window of
    ``context_window_tokens``."""
    _, others = active_skills(snapshot)
    claude = _block([s.entry(_cut(s.description, CLAUDE_CODE_DESCRIPTION_CHARS))
                     for s in others])
    codex = _block([s.entry(None) for s in others])
    claude_tokens = max(1, int(context_window_tokens * CLAUDE_CODE_PERCENT / 100))
    codex_tokens = max(1, int(context_window_tokens * CODEX_PERCENT / 100))
    return [
        BudgetCheck("claude-code", f"1% of a {context_window_tokens}-token context window, "
                    f"descriptions cut at {CLAUDE_CODE_DESCRIPTION_CHARS} characters",
                    len(claude), estimate_tokens(claude), None, claude_tokens),
        BudgetCheck("codex", f"2% of a {context_window_tokens}-token context window or "
                    f"{CODEX_CHARS} characters, the smaller",
                    len(codex), estimate_tokens(codex), CODEX_CHARS, codex_tokens),
    ]
