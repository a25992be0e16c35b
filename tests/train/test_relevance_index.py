"""The incremental BM25 index ranks exactly as scoring every document does."""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
from collections import Counter

from expgit.retrieval.lexical_index import LexicalIndex
from expgit.retrieval.relevance import LexicalRanker, _document_tokens, eligible, tokenize
from expgit.store.derived.snapshot import ExperienceEntry, Snapshot
from expgit.store.repository import ExperienceRepository


def reference_scores(query: str, snapshot: Snapshot) -> list[tuple[float, str]]:
    """The plain BM25 of every eligible entry (the ranker before its index)."""
    entries = eligible(snapshot)
    docs = [Counter(_document_tokens(e)) for e in entries]
    lengths = [sum(d.values()) for d in docs]
    avg = (sum(lengths) / len(lengths) or 1.0) if lengths else 1.0
    terms = set(tokenize(query))
    df = {t: sum(1 for d in docs if t in d) for t in terms}
    n = len(docs)
    scored = []
    for entry, doc, length in zip(entries, docs, lengths, strict=True):
        score = 0.0
        for term in terms:
            tf = doc.get(term, 0)
            if tf:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf * (1.5 + 1) / (tf + 1.5 * (1 - 0.75 + 0.75 * length / avg))
        scored.append((score, entry.name))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return scored


def entry(name: str, body: str, *, status: str = "active", tags: str = "x") -> ExperienceEntry:
    text = f"---\nname: {name}\nstatus: {status}\nsummary: about {name}\ntags: [{tags}]\n---\n" \
        f"{body}\n"
    data = text.encode()
    return ExperienceEntry(name, f"experiences/{name}.md", hashlib.sha1(data).hexdigest(),
                           data, 1, None, 800)


def snapshot(entries: dict[str, ExperienceEntry]) -> Snapshot:
    return Snapshot("c" * 40, "t" * 40, "experiences", dict(entries), [])


def check(ranker: LexicalRanker, query: str, snap: Snapshot) -> None:
    expected = reference_scores(query, snap)
    got = [(score, e.name) for score, e in ranker.scores(query, snap)]
    assert got == expected  # the same floats, bit for bit, in the same order
    for k in (0, 1, 3, len(expected), len(expected) + 2):
        ranked = asyncio.run(ranker.rank(query, snap, k))
        assert [e.name for e in ranked] == [name for _, name in expected[:k]]
        assert all(e is snap.entries[e.name] for e in ranked)


def test_same_ranking_as_plain_bm25_on_example_repo(seeded_repo: ExperienceRepository
                                                    ) -> None:
    snap = seeded_repo.snapshot()
    ranker = LexicalRanker()
    for query in ("How many checked bags are free for a gold member?", "refund gift card",
                  "human agent transfer", "", "zzz nothing", "cancel cancelled cancellation"):
        check(ranker, query, snap)


_WORD_LIST = """bag fee refund cancel flight change seat gold member economy insurance card
agent human policy rule hour day ticket upgrade meal"""
WORDS = _WORD_LIST.split()


def random_text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def test_same_ranking_on_random_corpora_as_they_change() -> None:
    rng = random.Random(7)
    ranker = LexicalRanker()
    entries: dict[str, ExperienceEntry] = {}
    for step in range(60):
        for _ in range(rng.randint(1, 4)):  # add, edit, deprecate or delete some entries
            action = rng.random()
            names = sorted(entries)
            if action < 0.5 or not names:
                name = f"e{rng.randint(0, 80)}"
                entries[name] = entry(name, random_text(rng, rng.randint(0, 40)))
            elif action < 0.7:
                name = rng.choice(names)
                status = rng.choice(("active", "draft", "deprecated"))
                entries[name] = entry(name, random_text(rng, 10), status=status)
            elif action < 0.9:
                del entries[rng.choice(names)]
            else:
                name = rng.choice(names)
                entries[name] = ExperienceEntry(name, f"experiences/{name}.md", "f" * 40,
                                                b"not an experience", 1, None, 800)
        snap = snapshot(entries)
        check(ranker, random_text(rng, rng.randint(0, 6)), snap)
        if step % 10 == 0:  # an old snapshot again, then a fresh ranker: still the same
            check(ranker, random_text(rng, 3), snapshot({}))
            check(LexicalRanker(), random_text(rng, 3), snap)


def test_index_is_updated_by_the_changed_entries_only() -> None:
    docs = {f"e{i}": entry(f"e{i}", f"refund {i}") for i in range(10)}
    counted: list[str] = []

    def counts(e: ExperienceEntry) -> Counter[str]:
        counted.append(e.name)
        return Counter(_document_tokens(e))

    first = LexicalIndex.build(snapshot(docs), counts, lambda e: True)
    assert sorted(counted) == sorted(docs)
    assert LexicalIndex.build(snapshot(docs), counts, lambda e: True, first) is first
    counted.clear()
    docs["e10"] = entry("e10", "refund seat")
    docs["e3"] = entry("e3", "seat")
    second = LexicalIndex.build(snapshot(docs), counts, lambda e: True, first)
    assert sorted(counted) == ["e10", "e3"]
    assert "seat" not in first.postings and set(second.postings["seat"]) == {"e10", "e3"}
    assert "e3" in first.postings["refund"] and "e3" not in second.postings["refund"]
    del docs["e10"]
    third = LexicalIndex.build(snapshot(docs), counts, lambda e: True, second)
    assert set(third.postings["seat"]) == {"e3"} and third.names == sorted(docs)
    assert third.total == sum(third.lengths.values()) == first.total - 1


def test_a_changed_token_budget_re_checks_the_entry() -> None:
    big = entry("big", "refund " * 200)
    small_budget = ExperienceEntry(big.name, big.path, big.blob, big.data, 1, None, 10)
    ranker = LexicalRanker()
    assert [e.name for e in asyncio.run(ranker.rank("refund", snapshot({"big": big}), 5))] \
        == reference_names("refund", snapshot({"big": big}))
    snap = snapshot({"big": small_budget})
    assert [e.name for e in asyncio.run(ranker.rank("refund", snap, 5))] \
        == reference_names("refund", snap)


def reference_names(query: str, snap: Snapshot) -> list[str]:
    return [name for _, name in reference_scores(query, snap)]
