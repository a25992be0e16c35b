"""Lexical measures over a snapshot's experiences, with the tokens of
:mod:`expgit.retrieval.relevance` (lowercase, stop words dropped, crudely stemmed).

* relevance of an experience to a query: the share of the query's distinct tokens found
  in the experience's name, summary, tags and body (0..1; BM25 scores are not comparable
  across libraries, a share is);
* similarity of two experiences: cosine of their token counts (0..1).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from expgit.retrieval.relevance import document_text, eligible, tokenize
from expgit.store.derived.snapshot import Snapshot


class LexicalIndex:
    """The token counts of a snapshot's usable (valid, not deprecated) experiences."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.counts: dict[str, Counter[str]] = {
            e.name: Counter(tokenize(document_text(e))) for e in eligible(snapshot)}
        self.blobs = {e.name: e.blob for e in eligible(snapshot)}

    def relevance(self, query: str, name: str) -> float:
        terms = set(tokenize(query))
        doc = self.counts.get(name)
        if not terms or doc is None:
            return 0.0
        return sum(1 for t in terms if t in doc) / len(terms)

    def best(self, query: str, names: Iterable[str] | None = None
             ) -> tuple[float, str | None]:
        """The most relevant of ``names`` (all usable experiences if None) to ``query``:
        (relevance, name), ties by name; (0.0, None) if there is none."""
        pool = sorted(self.counts if names is None else set(names) & set(self.counts))
        scored = sorted(((self.relevance(query, n), n) for n in pool),
                        key=lambda item: (-item[0], item[1]))
        return scored[0] if scored else (0.0, None)

    def similarity(self, a: str, b: str) -> float:
        x, y = self.counts.get(a), self.counts.get(b)
        if not x or not y:
            return 0.0
        dot = sum(v * y.get(k, 0) for k, v in x.items())
        norm = math.sqrt(sum(v * v for v in x.values())) * math.sqrt(
            sum(v * v for v in y.values()))
        return dot / norm if norm else 0.0

    def similar_pairs(self, threshold: float) -> list[tuple[float, str, str]]:
        """Pairs (similarity, a, b), a < b, with similarity at least ``threshold``, most
        similar first."""
        names = sorted(self.counts)
        pairs = [(self.similarity(a, b), a, b) for i, a in enumerate(names)
                 for b in names[i + 1:]]
        return sorted((p for p in pairs if p[0] >= threshold), key=lambda p: (-p[0], p[1:]))
