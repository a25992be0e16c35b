"""The BM25 index of a snapshot's eligible experiences, updated entry by entry.

A :class:`LexicalIndex` holds, for the eligible entries of one snapshot, each document's
token counts and length, the total length and an inverted index (term -> {name: term
frequency}). :meth:`LexicalIndex.build` derives the index of a new snapshot from the
previous one by the entries whose (path, blob, token budget) changed, so a snapshot with
one more experience costs one document, not the whole set. :meth:`LexicalIndex.scores`
scores only the documents that contain a query term; every other eligible document scores
0. The figures are those of scoring every document (same formula, same order of
summation, ties by name).

An index never changes once built (its per-term score cache only fills in), so several
threads may use one.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from expgit.store.derived.snapshot import ExperienceEntry, Snapshot

K1 = 1.5
B = 0.75
_REBUILD_SHARE = 0.5  # more changed entries than this share: index from scratch

Key = tuple[str, str, int]  # (path, blob, token budget): what decides an entry's document


def _key(entry: ExperienceEntry) -> Key:
    return entry.path, entry.blob, entry.token_budget


@dataclass
class LexicalIndex:
    """BM25 statistics of the eligible entries of one snapshot (see the module)."""

    keys: dict[str, Key]  # every entry of the snapshot, eligible or not
    docs: dict[str, Counter[str]]  # eligible entries: token counts
    lengths: dict[str, int]
    total: int
    postings: dict[str, dict[str, int]]
    names: list[str]  # eligible names, sorted
    _contributions: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    _norms: dict[str, float] | None = None

    @classmethod
    def build(cls, snapshot: Snapshot, counts: Callable[[ExperienceEntry], Counter[str]],
              usable: Callable[[ExperienceEntry], bool],
              previous: LexicalIndex | None = None) -> LexicalIndex:
        """The index of ``snapshot``: ``counts`` gives an entry's token counts, ``usable``
        whether it is eligible; from ``previous`` (returned as is when nothing changed)
        by the changed entries."""
        entries = snapshot.entries
        old = previous.keys if previous is not None else {}
        changed = [name for name, entry in entries.items() if old.get(name) != _key(entry)]
        removed = [name for name in old if name not in entries]
        if previous is not None and not changed and not removed:
            return previous
        if previous is None or len(changed) + len(removed) > _REBUILD_SHARE * len(entries):
            previous = cls({}, {}, {}, 0, {}, [])
            changed, removed = list(entries), []
        index = cls({name: _key(entry) for name, entry in entries.items()},
                    dict(previous.docs), dict(previous.lengths), previous.total,
                    dict(previous.postings), [])
        owned: set[str] = set()  # terms whose postings are this index's own copy

        def own(term: str) -> dict[str, int]:
            if term not in owned:
                owned.add(term)
                index.postings[term] = dict(index.postings.get(term, {}))
            return index.postings[term]

        for name in [*removed, *changed]:
            doc = index.docs.pop(name, None)
            if doc is not None:
                index.total -= index.lengths.pop(name)
                for term in doc:
                    postings = own(term)
                    del postings[name]
                    if not postings:
                        del index.postings[term]
                        owned.discard(term)
        for name in changed:
            entry = entries[name]
            if not usable(entry):
                continue
            doc = index.docs[name] = counts(entry)
            index.lengths[name] = length = sum(doc.values())
            index.total += length
            for term, tf in doc.items():
                own(term)[name] = tf
        index.names = sorted(index.docs)
        return index

    def _contribution(self, term: str) -> list[tuple[str, float]]:
        """(name, BM25 term score) of the documents containing ``term``."""
        found = self._contributions.get(term)
        if found is None:
            postings = self.postings.get(term, {})
            n, df = len(self.docs), len(postings)
            avg = self.total / n or 1.0
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            norms = self._norms
            if norms is None:  # K1 * (1 - B + B * length / avg) of each document
                norms = self._norms = {name: K1 * (1 - B + B * length / avg)
                                       for name, length in self.lengths.items()}
            found = [(name, idf * tf * (K1 + 1) / (tf + norms[name]))
                     for name, tf in postings.items()]
            found = self._contributions.setdefault(term, found)
        return found

    def scores(self, terms: set[str], snapshot: Snapshot, k: int | None = None
               ) -> list[tuple[float, ExperienceEntry]]:
        """(score, entry of ``snapshot``) of the eligible entries for the query ``terms``,
        best first, ties by name; the first ``k`` only when given."""
        if not self.names:
            return []
        totals: dict[str, float] = {}
        for term in terms:  # the set's order: each document sums its terms as it did
            for name, value in self._contribution(term):
                totals[name] = totals.get(name, 0.0) + value
        limit = len(self.names) if k is None else min(max(k, 0), len(self.names))
        if k is None or limit >= len(totals):
            best = sorted(totals.items(), key=lambda item: (-item[1], item[0]))
        else:
            best = heapq.nsmallest(limit, totals.items(), key=lambda item: (-item[1], item[0]))
        result = [(score, snapshot.entries[name]) for name, score in best[:limit]]
        if len(result) < limit:
            for name in self.names:
                if name not in totals:
                    result.append((0.0, snapshot.entries[name]))
                    if len(result) == limit:
                        break
        return result
