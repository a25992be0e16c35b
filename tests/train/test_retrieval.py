"""select_context: always-on first, then by BM25 within the token budget and top-k."""

from __future__ import annotations

import hashlib

import pytest

from expgit.errors import UsageError
from expgit.retrieval.context import ALWAYS_ON, select_context
from expgit.retrieval.usage import read_usage
from expgit.store.derived.snapshot import ExperienceEntry, Snapshot
from expgit.store.repository import ExperienceRepository


def entry(name: str, body: str, *, status: str = "active", always: bool = False,
          summary: str = "") -> ExperienceEntry:
    flag = "always: true\n" if always else ""
    data = (f"---\nname: {name}\nstatus: {status}\nsummary: {summary or name}\n{flag}---\n"
            f"{body}\n").encode()
    return ExperienceEntry(name, f"experiences/{name}.md", hashlib.sha1(data).hexdigest(),
                           data, 1, None, 800)


def snapshot(*entries: ExperienceEntry) -> Snapshot:
    tree = hashlib.sha1("".join(e.blob for e in entries).encode()).hexdigest()
    return Snapshot("0" * 40, tree, "experiences", {e.name: e for e in entries}, [])


LIBRARY = snapshot(
    entry("refund-rules", "Refunds go back to the original card within 5 days."),
    entry("baggage-rules", "Two checked bags are free for gold members."),
    entry("greeting", "Greet the customer by name.", always=True),
    entry("old-refunds", "Refunds take 30 days.", status="deprecated"),
    entry("draft-refunds", "Refunds refunds refunds.", status="draft"),
    *(entry(f"filler-{i:02d}", "Nothing about the request here. " * 40) for i in range(20)))


def test_always_on_first_then_by_relevance() -> None:
    sel = select_context(LIBRARY, "How long do refunds to my card take?", top_k=2)
    assert sel.names[:2] == ["greeting", "refund-rules"]
    assert sel.items[0].reason == ALWAYS_ON and sel.items[0].score is None
    assert sel.items[1].reason.startswith("rank 1 (bm25 score ") and sel.items[1].rank == 1
    assert len(sel.items) == 3  # top_k counts the ranked ones, not the always-on
    assert "old-refunds" not in sel.names and "draft-refunds" not in sel.names
    assert sel.candidates == 23
    assert sel.tokens == sum(i.tokens for i in sel.items)
    md = sel.markdown()
    assert md.index('<experience name="greeting">') < md.index('name="refund-rules"')
    assert "original card" in md and "Summary: refund-rules" in md
    records = [u.record() for u in sel.usage()]
    assert read_usage({"experiences_used": records}) == sel.usage()  # round trip


def test_token_budget_bounds_the_context() -> None:
    whole = select_context(LIBRARY, "refunds", token_budget=100_000)
    default = select_context(LIBRARY, "refunds")  # 4000 tokens: not every filler fits
    small = select_context(LIBRARY, "refunds", token_budget=120)
    assert len(whole.items) == 23
    assert default.tokens <= 4000 and 3 < len(default.items) < 23
    assert small.tokens <= 120 and small.names[:2] == ["greeting", "refund-rules"]
    assert len(small.items) < len(whole.items)
    none = select_context(LIBRARY, "refunds", top_k=0)
    assert none.names == ["greeting"]


def test_bad_limits_are_refused() -> None:
    with pytest.raises(UsageError, match="top_k must be 0 or more"):
        select_context(LIBRARY, "x", top_k=-1)
    with pytest.raises(UsageError, match="at least 1"):
        select_context(LIBRARY, "x", token_budget=0)
    with pytest.raises(UsageError, match="always-on experiences need about"):
        select_context(LIBRARY, "x", token_budget=5)


def test_real_repository_and_settings(seeded_repo: ExperienceRepository) -> None:
    sel = select_context(seeded_repo.snapshot(), "Can I cancel my basic economy ticket?",
                         top_k=1)
    assert sel.names == ["cancellation-eligibility-rules"]
    assert sel.commit == seeded_repo.main_commit()
    assert seeded_repo.settings.context.token_budget == 4000
    assert seeded_repo.settings.context.top_k is None
