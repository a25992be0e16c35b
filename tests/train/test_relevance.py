"""Experience relevance: BM25 lexical ranking and the embeddings ranker."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from expgit.llm.port import LLMError
from expgit.retrieval.relevance import (
    EmbeddingRanker,
    ExperienceRanker,
    LexicalRanker,
    eligible,
    tokenize,
)
from expgit.store.derived.snapshot import ExperienceEntry, Snapshot
from expgit.store.repository import ExperienceRepository


def names(entries: list[ExperienceEntry]) -> list[str]:
    return [e.name for e in entries]


def rank(ranker: ExperienceRanker, query: str, snapshot: Snapshot, k: int) -> list[str]:
    return names(asyncio.run(ranker.rank(query, snapshot, k)))


def entry(name: str, body: str, *, status: str = "active", summary: str = "",
          raw: str | None = None) -> ExperienceEntry:
    text = raw if raw is not None else (
        f"---\nname: {name}\nstatus: {status}\nsummary: {summary}\n---\n{body}\n")
    data = text.encode()
    return ExperienceEntry(name, f"experiences/{name}.md", hashlib.sha1(data).hexdigest(),
                           data, 1, None, 800)


def snapshot(*entries: ExperienceEntry) -> Snapshot:
    return Snapshot("c" * 40, "t" * 40, "experiences", {e.name: e for e in entries}, [])


QUERIES = {
    "How many checked bags are free for a gold member in economy?": "checked-baggage-allowance",
    "Can I cancel my basic economy ticket booked 3 days ago without insurance?":
        "cancellation-eligibility-rules",
    "Can I change my flight to a later date?": "flight-change-rules",
    "Can I get the refund on a gift card instead of my credit card payment?":
        "refund-method-rules",
    "I insist on talking to a human agent": "when-to-transfer-to-human",
}


@pytest.mark.parametrize("query, best", QUERIES.items())
def test_lexical_ranking_on_example_repo(seeded_repo: ExperienceRepository, query: str,
                                         best: str) -> None:
    ranked = rank(LexicalRanker(), query, seeded_repo.snapshot(), 3)
    assert ranked[0] == best and len(ranked) == 3


def test_k_bounds_the_result(seeded_repo: ExperienceRepository) -> None:
    snap = seeded_repo.snapshot()
    ranker = LexicalRanker()
    query = "checked bags"
    assert rank(ranker, query, snap, 0) == []
    assert rank(ranker, query, snap, -1) == []
    assert rank(ranker, query, snap, 1) == ["checked-baggage-allowance"]
    everything = rank(ranker, query, snap, 100)
    assert sorted(everything) == snap.names()  # the draft is eligible, scores keep order
    assert rank(ranker, query, snap, 4) == everything[:4]


def test_scores_are_deterministic_with_ties_by_name() -> None:
    snap = snapshot(entry("zeta", "alpha beta"), entry("alpha", "alpha beta"),
                    entry("mid", "gamma"))
    ranker = LexicalRanker()
    assert rank(ranker, "beta", snap, 3) == ["alpha", "zeta", "mid"]
    assert rank(ranker, "nothing matches", snap, 3) == ["alpha", "mid", "zeta"]
    assert rank(ranker, "", snap, 2) == ["alpha", "mid"]
    scores = ranker.scores("beta", snap)
    assert scores[0][0] == scores[1][0] > 0 and scores[2][0] == 0


def test_name_summary_and_tags_weigh_more_than_body() -> None:
    snap = snapshot(entry("refunds", "Some text about other things."),
                    entry("other", "Refunds are mentioned once, about other things."))
    assert rank(LexicalRanker(), "refunds", snap, 1) == ["refunds"]


def test_deprecated_and_invalid_entries_are_skipped() -> None:
    snap = snapshot(entry("old-bags", "bags bags bags", status="deprecated"),
                    entry("broken-bags", "", raw="no front matter, bags bags"),
                    entry("wrong-name", "", raw="---\nname: other\n---\nbags\n"),
                    entry("draft-bags", "bags", status="draft"),
                    entry("bags", "bags"))
    assert names(eligible(snap)) == ["bags", "draft-bags"]
    assert rank(LexicalRanker(), "bags", snap, 10) == ["bags", "draft-bags"]
    assert rank(LexicalRanker(), "bags", snapshot(), 10) == []


def test_tokenize() -> None:
    assert tokenize("How many Checked-Bags are FREE?") == ["many", "check", "bag", "free"]
    assert tokenize("business class, 24h, 2024") == ["business", "class", "24h", "2024"]
    assert set(tokenize("cancel cancels cancelled cancelling cancellation cancellable")
               ) == {"cancel"}
    assert set(tokenize("refunds refunded refundable")) == {"refund"}
    assert tokenize("baggage baggages") == ["baggag", "baggag"]


# ----------------------------------------------------------------------------- embeddings
VOCAB = ("bag", "cancel", "refund", "change", "human")


class FakeEmbeddings:
    """Keyword-count vectors; records every call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.wrong_count = False

    async def embed(self, texts: list[str], *, stage: str) -> list[list[float]]:
        assert stage == "embed"
        self.calls.append(list(texts))
        await asyncio.sleep(0.01)
        vectors = [[float(t.lower().count(word)) for word in VOCAB] for t in texts]
        return vectors[:-1] if self.wrong_count else vectors


def test_embedding_ranker(seeded_repo: ExperienceRepository) -> None:
    snap = seeded_repo.snapshot()
    model = FakeEmbeddings()
    ranker = EmbeddingRanker(model)
    assert rank(ranker, "my bag, my bag", snap, 2)[0] == "checked-baggage-allowance"
    assert len(model.calls) == 1 and len(model.calls[0]) == 1 + len(snap.entries)
    assert model.calls[0][0] == "my bag, my bag"
    assert any("Checked baggage allowance" in text for text in model.calls[0][1:])
    # cached by blob: only the query is embedded now
    assert rank(ranker, "a human please", snap, 1) == ["when-to-transfer-to-human"]
    assert model.calls[1] == ["a human please"]
    assert rank(ranker, "anything", snap, 0) == [] and len(model.calls) == 2
    # a changed snapshot: only the new blob is embedded, with the query, in one call
    changed = Snapshot(snap.commit, "x" * 40, snap.root, {
        **snap.entries, "talk-to-human": entry("talk-to-human", "human human")}, [])
    assert rank(ranker, "a human please", changed, 1) == ["talk-to-human"]
    assert model.calls[2][0] == "a human please" and "human human" in model.calls[2][1]
    assert len(model.calls) == 3 and len(model.calls[2]) == 2


def test_embedding_ranker_skips_deprecated_and_zero_vectors_score_zero() -> None:
    snap = snapshot(entry("old", "bag", status="deprecated"), entry("b", "nothing"),
                    entry("a", "bag"))
    model = FakeEmbeddings()
    assert rank(EmbeddingRanker(model), "bag", snap, 5) == ["a", "b"]
    assert len(model.calls[0]) == 3  # the query and the two eligible entries


def test_concurrent_ranks_embed_each_experience_once(
        seeded_repo: ExperienceRepository) -> None:
    snap = seeded_repo.snapshot()
    model = FakeEmbeddings()
    ranker = EmbeddingRanker(model)

    async def run() -> list[list[ExperienceEntry]]:
        return await asyncio.gather(*(ranker.rank(q, snap, 1) for q in
                                      ("bag", "change", "refund", "human")))

    results = asyncio.run(run())
    assert [r[0].name for r in results] == [
        "checked-baggage-allowance", "flight-change-rules", "refund-method-rules",
        "when-to-transfer-to-human"]
    embedded = [text for call in model.calls for text in call]
    assert len(model.calls) == 4
    assert len(embedded) == len(snap.entries) + 4


def test_embedding_ranker_across_event_loops(seeded_repo: ExperienceRepository) -> None:
    snap = seeded_repo.snapshot()
    model = FakeEmbeddings()
    ranker: ExperienceRanker = EmbeddingRanker(model)

    async def contended() -> list[list[ExperienceEntry]]:
        return await asyncio.gather(*(ranker.rank(q, snap, 1) for q in ("bag", "human")))

    first, second = asyncio.run(contended()), asyncio.run(contended())  # two loops
    assert [r[0].name for r in first] == [r[0].name for r in second]
    assert sum(len(call) for call in model.calls) == len(snap.entries) + 4


def test_embedding_ranker_refuses_wrong_vector_counts(
        seeded_repo: ExperienceRepository) -> None:
    model = FakeEmbeddings()
    model.wrong_count = True
    with pytest.raises(LLMError, match="vectors for"):
        rank(EmbeddingRanker(model), "bag", seeded_repo.snapshot(), 1)
