"""Which experiences an agent reads for one request: a bounded, relevant context.

:func:`select_context` is the one retrieval of expgit: the rollout executor of ``train``,
``eval`` and ``env serve`` builds its system prompt with it, ``expgit context`` prints
it and ``expgit mcp`` serves it. Of a snapshot's **active** experiences with valid front
matter (drafts, deprecated and invalid files are never shown) it takes

1. every experience marked ``always: true`` in its front matter, by name (reason
   ``always-on``); their total over ``token_budget`` is refused (UsageError, exit 2);
2. then the others by BM25 relevance to the query (:class:`LexicalRanker`; equal scores
   by name), each one that still fits in what is left of ``token_budget`` (one that does
   not fit is passed over for the next), at most ``top_k`` of them (None: no count
   limit), reason ``rank N (bm25 score X)``; experiences sharing no term with the query
   come last, so a small library is shown whole.

An experience's cost is the estimated tokens (about four UTF-8 bytes per token) of its
block in the prompt: name, summary and body. The BM25 index is built once per snapshot
and kept in memory (by snapshot id, a few snapshots), so a request costs one index
lookup per query term: no model call, nothing written.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass

from expgit.errors import InvalidInputError, UsageError
from expgit.retrieval.relevance import LexicalRanker
from expgit.retrieval.usage import UsedExperience
from expgit.store.derived.snapshot import ExperienceEntry, Snapshot
from expgit.store.format.experience import estimate_tokens
from expgit.store.format.templates import render
from expgit.store.repository import ExperienceRepository

DEFAULT_TOKEN_BUDGET = 4000
ALWAYS_ON = "always-on"
_BLOCK_OVERHEAD = 12  # the <experience name="..."> tags and the "Summary:" line
_SNAPSHOTS_KEPT = 4

_prepared: OrderedDict[str, _Prepared] = OrderedDict()
_prepared_lock = threading.Lock()


@dataclass(frozen=True)
class ContextItem:
    """One experience of a selection: what the prompt shows, and why it is there."""

    name: str
    summary: str
    body: str
    blob: str  # the file's blob id: the version shown
    tokens: int  # estimated tokens of its block in the prompt
    reason: str  # "always-on" or "rank N (bm25 score X)"
    rank: int | None = None  # 1-based rank among the ranked experiences
    score: float | None = None  # BM25 score

    def usage(self) -> UsedExperience:
        """The ``experiences_used`` record of a rollout that showed it."""
        return UsedExperience(name=self.name, blob=self.blob, reason=self.reason,
                              score=self.score)

    def as_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class ContextSelection:
    """The experiences chosen for ``query`` (always-on first, then by relevance)."""

    query: str
    snapshot_id: str
    commit: str | None
    token_budget: int
    top_k: int | None
    items: list[ContextItem]
    candidates: int  # active, valid experiences in the snapshot

    @property
    def tokens(self) -> int:
        return sum(item.tokens for item in self.items)

    @property
    def names(self) -> list[str]:
        return [item.name for item in self.items]

    def usage(self) -> list[UsedExperience]:
        return [item.usage() for item in self.items]

    def markdown(self) -> str:
        """The experiences as a markdown section ready for a system prompt."""
        return render("context.md.j2", experiences=self.items)

    def as_json(self) -> dict[str, object]:
        return {"query": self.query, "commit": self.commit, "snapshot_id": self.snapshot_id,
                "token_budget": self.token_budget, "top_k": self.top_k,
                "tokens": self.tokens, "candidates": self.candidates,
                "experiences": [item.as_json() for item in self.items]}


def check_limits(token_budget: int | None, top_k: int | None) -> tuple[int, int | None]:
    """The budget (default :data:`DEFAULT_TOKEN_BUDGET`) and top-k, refused when out of
    range (UsageError, exit 2)."""
    budget = DEFAULT_TOKEN_BUDGET if token_budget is None else token_budget
    if budget < 1:
        raise UsageError(f"the context token budget must be at least 1, not {budget}",
                         hint="give --token-budget N or [context] token_budget >= 1")
    if top_k is not None and top_k < 0:
        raise UsageError(f"top_k must be 0 or more, not {top_k}",
                         hint="give --top-k N >= 0, or leave it out for no count limit")
    return budget, top_k


@dataclass(frozen=True)
class _Shown:
    """What the prompt shows of one active, valid experience, and its cost."""

    summary: str
    body: str
    always: bool
    tokens: int


@dataclass(frozen=True)
class _Prepared:
    """What a snapshot's selections share: its BM25 ranker, what each candidate shows,
    its always-on experiences and the cost of its cheapest candidate."""

    ranker: LexicalRanker
    shown: dict[str, _Shown]
    always: list[ContextItem]
    cheapest: int


def _shown(entry: ExperienceEntry) -> _Shown | None:
    """What an active, valid entry shows; None for any other."""
    try:
        exp = entry.experience
    except InvalidInputError:
        return None
    if exp.status != "active":
        return None
    fm = exp.front_matter
    tokens = estimate_tokens(f"{entry.name}\n{fm.summary}\n{exp.body.strip()}")
    return _Shown(fm.summary, exp.body, fm.always, tokens + _BLOCK_OVERHEAD)


def _item(entry: ExperienceEntry, shown: _Shown, reason: str, rank: int | None = None,
          score: float | None = None) -> ContextItem:
    return ContextItem(entry.name, shown.summary, shown.body, entry.blob, shown.tokens,
                       reason, rank, score)


def _prepare(snapshot: Snapshot) -> _Prepared:
    """The shared part of ``snapshot``'s selections, kept by snapshot id."""
    with _prepared_lock:
        found = _prepared.get(snapshot.id)
        if found is not None:
            _prepared.move_to_end(snapshot.id)
            return found
    shown = {name: s for name, s in ((n, _shown(snapshot.entries[n]))
                                     for n in snapshot.names()) if s is not None}
    always = [_item(snapshot.entries[name], s, ALWAYS_ON)
              for name, s in shown.items() if s.always]
    cheapest = min((s.tokens for s in shown.values() if not s.always), default=0)
    prepared = _Prepared(LexicalRanker(), shown, always, cheapest)
    prepared.ranker.index(snapshot)
    with _prepared_lock:
        prepared = _prepared.setdefault(snapshot.id, prepared)
        while len(_prepared) > _SNAPSHOTS_KEPT:
            _prepared.popitem(last=False)
    return prepared


def _fill(prepared: _Prepared, ranked: list[tuple[float, ExperienceEntry]], room: int,
          top_k: int | None) -> tuple[list[ContextItem], bool]:
    """The ranked experiences that fit in ``room``, and whether the list ran out first."""
    items: list[ContextItem] = []
    rank = 0
    for score, entry in ranked:
        if (top_k is not None and len(items) >= top_k) or room < prepared.cheapest:
            return items, False
        shown = prepared.shown.get(entry.name)
        if shown is None or shown.always:
            continue
        rank += 1
        if shown.tokens <= room:
            items.append(_item(entry, shown, f"rank {rank} (bm25 score {score:.3f})", rank,
                               round(score, 6)))
            room -= shown.tokens
    return items, True


def _ranked_fill(prepared: _Prepared, snapshot: Snapshot, query: str, room: int,
                 top_k: int | None) -> list[ContextItem]:
    """:func:`_fill` over the best ranked entries, asking the index for four times as
    many while the list runs out before the room or the top-k does."""
    if top_k == 0 or not prepared.shown:
        return []
    total = len(prepared.shown)
    wanted = room // max(prepared.cheapest, 1) + 1
    limit = min(total, 2 * (wanted if top_k is None else min(wanted, top_k)) + 8)
    while True:
        ranked = prepared.ranker.scores(query, snapshot, limit)
        items, ran_out = _fill(prepared, ranked, room, top_k)
        if not ran_out or len(ranked) < limit or limit >= len(snapshot.entries):
            return items
        limit *= 4


def select_context(snapshot: Snapshot, query: str, *, token_budget: int | None = None,
                   top_k: int | None = None) -> ContextSelection:
    """The experiences an agent should read for ``query`` (see the module docstring)."""
    budget, top_k = check_limits(token_budget, top_k)
    prepared = _prepare(snapshot)
    always = prepared.always
    used = sum(item.tokens for item in always)
    if used > budget:
        raise UsageError(
            f"the always-on experiences need about {used} tokens, over the context "
            f"token budget of {budget}",
            hint="raise --token-budget or [context] token_budget, or mark fewer "
                 "experiences always: true")
    items = always + _ranked_fill(prepared, snapshot, query, budget - used, top_k)
    return ContextSelection(query=query, snapshot_id=snapshot.id, commit=snapshot.commit,
                            token_budget=budget, top_k=top_k, items=items,
                            candidates=len(prepared.shown))


def context_for(repo: ExperienceRepository | str | os.PathLike[str], query: str, *,
                at: str | None = None, token_budget: int | None = None,
                top_k: int | None = None) -> ContextSelection:
    """:func:`select_context` of the experiences at revision ``at`` (default: the tip of
    ``main``) of ``repo`` (a repository or its path), the budget and top-k defaulting to
    its ``[context]`` settings. An unknown revision is refused (NotFoundError, exit 5)."""
    if not isinstance(repo, ExperienceRepository):
        repo = ExperienceRepository.open(repo)
    settings = repo.settings.context
    budget = settings.token_budget if token_budget is None else token_budget
    check_limits(budget, top_k)  # refused before any git work
    return select_context(repo.snapshot(at), query, token_budget=budget,
                          top_k=settings.top_k if top_k is None else top_k)
