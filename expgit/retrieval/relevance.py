"""Which experiences of a snapshot are most relevant to a query text.

* :class:`LexicalRanker` (the default): BM25 (k1=1.5, b=0.75) over the tokens of the
  name, summary and tags (counted twice: a cheap field boost) and the body. Tokens are
  lowercase ASCII letter/digit runs, English stop words dropped, crudely stemmed
  (``cancellation``, ``cancelled`` and ``cancels`` all count as ``cancel``).
  Pure Python; equal scores are ordered by name, so the ranking is deterministic.
* :class:`EmbeddingRanker`: cosine similarity of embeddings from an
  :class:`expgit.llm.port.EmbeddingModel`; an experience's embedding is cached in memory
  by its blob sha (up to 4096 blobs), so a snapshot is embedded once; one ``embed`` call
  per :meth:`rank` (the query, plus any experience not embedded yet).

Both skip entries whose front matter is invalid (they are not usable experiences) and
entries with status ``deprecated`` (retired lessons); ``draft`` entries are kept, since a
caller looking for overlaps wants to see them (the rollout executor keeps only ``active``).
Both return ``min(k, eligible)`` entries, best first, including ones scoring 0.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import re
import threading
from collections import Counter
from typing import Any, Protocol, runtime_checkable

from expgit.errors import InvalidInputError
from expgit.llm.port import EmbeddingModel, LLMError
from expgit.retrieval.lexical_index import LexicalIndex
from expgit.store.derived.snapshot import ExperienceEntry, Snapshot

_TOKEN = re.compile(r"[a-z0-9]+")
_STOP_WORDS = (
    "a about after all also am an and any are as at be been being but by can could d did "
    "didn do does doesn don for from get got had has have hello hi how i if in into is it its "
    "just ll m me my need no not of on or our please re really s so some t than thank thanks "
    "that the their them then there these they this to too ve very want was we were what "
    "when where which who why will with without would you your")
_STOP = frozenset(_STOP_WORDS.split())
_SUFFIXES = ("ations", "ation", "ings", "ing", "able", "ed", "es", "s", "e")
_CACHE_LIMIT = 4096  # blobs per cache; the oldest are dropped first


class ExperienceRanker(Protocol):
    """Ranks a snapshot's usable experiences for a query; best first, at most ``k``."""

    async def rank(self, query: str, snapshot: Snapshot, k: int) -> list[ExperienceEntry]: ...


@runtime_checkable
class ScoringRanker(ExperienceRanker, Protocol):
    """A ranker that also tells its scores (higher is more relevant; 0 or less: no
    relation found), so that a caller can leave out the weak matches; a subclass gets
    :meth:`rank` from :meth:`ranked`."""

    async def ranked(self, query: str, snapshot: Snapshot, k: int
                     ) -> list[tuple[float, ExperienceEntry]]: ...

    async def rank(self, query: str, snapshot: Snapshot, k: int) -> list[ExperienceEntry]:
        return [entry for _, entry in await self.ranked(query, snapshot, k)]


def stem(token: str) -> str:
    """A crude suffix stripper: cancel/cancels/cancelled/cancellation -> cancel."""
    if len(token) <= 3 or not token.isalpha():
        return token
    for suffix in _SUFFIXES:
        stem_ = token[:-len(suffix)]
        keep = (suffix == "s" and stem_.endswith("s")) or (suffix == "e" and stem_[-1] in "aeiou")
        if token.endswith(suffix) and len(stem_) >= 3 and not keep:
            token = stem_
            break
    doubled = len(token) > 3 and token[-1] == token[-2] and token[-1] not in "aeiouls"
    if doubled or (len(token) > 4 and token.endswith("ll")):
        token = token[:-1]
    return token


def tokenize(text: str) -> list[str]:
    """Lowercase letter/digit runs, stop words dropped, stemmed."""
    return [stem(t) for t in _TOKEN.findall(text.lower()) if t not in _STOP]


def usable(entry: ExperienceEntry) -> bool:
    """Whether the entry has valid front matter and a status other than deprecated."""
    try:
        return entry.experience.status != "deprecated"
    except InvalidInputError:
        return False


def eligible(snapshot: Snapshot) -> list[ExperienceEntry]:
    """Entries with valid front matter and a status other than deprecated, by name."""
    return [snapshot.entries[name] for name in snapshot.names()
            if usable(snapshot.entries[name])]


def document_text(entry: ExperienceEntry) -> str:
    """What is ranked: name, summary, tags and body of a (valid) entry."""
    exp = entry.experience
    fm = exp.front_matter
    return f"{entry.name.replace('-', ' ')}\n{fm.summary}\ntags: {', '.join(fm.tags)}\n\n" \
        f"{exp.body}"


def _document_tokens(entry: ExperienceEntry) -> list[str]:
    fm = entry.experience.front_matter
    head = tokenize(f"{entry.name} {fm.summary} {' '.join(fm.tags)}")
    return head + head + tokenize(entry.experience.body)


class LexicalRanker(ScoringRanker):
    """BM25 ranking over name, summary, tags and body.

    Keeps a :class:`LexicalIndex` of the last snapshot ranked (token counts, lengths, an
    inverted index): a new snapshot is indexed from it by the entries whose blob changed,
    so a snapshot with one more experience costs one document, and a query scores only
    the documents that contain one of its terms. Token counts are cached by blob sha.
    Thread safe; the ranking is the same as scoring every document."""

    def __init__(self) -> None:
        self._tokens: dict[str, Counter[str]] = {}
        self._index: LexicalIndex | None = None
        self._snapshot: Snapshot | None = None  # the snapshot _index is of, and its size
        self._size = 0
        self._lock = threading.Lock()

    def _counts(self, entry: ExperienceEntry) -> Counter[str]:
        with self._lock:
            counts = self._tokens.get(entry.blob)
        if counts is None:
            counts = Counter(_document_tokens(entry))
            with self._lock:
                _trim(self._tokens, _CACHE_LIMIT - 1)
                self._tokens[entry.blob] = counts
        return counts

    def index(self, snapshot: Snapshot) -> LexicalIndex:
        """The index of ``snapshot``'s eligible entries (updated from the last one)."""
        with self._lock:
            previous, last, size = self._index, self._snapshot, self._size
        if previous is not None and last is snapshot and size == len(snapshot.entries):
            return previous  # the same snapshot again (a snapshot is not changed in place)
        index = LexicalIndex.build(snapshot, self._counts, usable, previous)
        with self._lock:
            self._index, self._snapshot, self._size = index, snapshot, len(snapshot.entries)
        return index

    def scores(self, query: str, snapshot: Snapshot, k: int | None = None
               ) -> list[tuple[float, ExperienceEntry]]:
        """(BM25 score, entry) of every eligible entry (the first ``k`` when given), best
        first, ties by name."""
        return self.index(snapshot).scores(set(tokenize(query)), snapshot, k)

    async def ranked(self, query: str, snapshot: Snapshot, k: int
                     ) -> list[tuple[float, ExperienceEntry]]:
        """(BM25 score, entry) of the best ``k``, best first (:meth:`scores`)."""
        return self.scores(query, snapshot, k) if k > 0 else []


def _trim(cache: dict[str, Any], size: int) -> None:
    """Drop the oldest entries of an insertion-ordered cache down to ``size``."""
    for key in list(itertools.islice(cache, max(0, len(cache) - max(size, 0)))):
        del cache[key]


def cosine(a: list[float], b: list[float]) -> float:
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0


class EmbeddingRanker(ScoringRanker):
    """Cosine-similarity ranking with an embedding model; embeddings cached by blob sha.

    One ``embed`` call per :meth:`rank` (stage ``stage``, default "embed"): the query
    together with the experiences not embedded yet. Raises LLMError if the model fails
    or returns the wrong number or size of vectors.
    """

    def __init__(self, model: EmbeddingModel, *, stage: str = "embed") -> None:
        self.model = model
        self.stage = stage
        self._cache: dict[str, list[float]] = {}
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    def _guard(self) -> asyncio.Lock:
        """The cache lock of the running event loop (a ranker may outlive a loop)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        vectors = await self.model.embed(texts, stage=self.stage)
        if len(vectors) != len(texts):
            raise LLMError(f"the embedding model returned {len(vectors)} vectors for "
                           f"{len(texts)} texts")
        if len({len(v) for v in vectors}) > 1 or any(not v for v in vectors):
            raise LLMError("the embedding model returned vectors of different or zero size")
        return vectors

    async def ranked(self, query: str, snapshot: Snapshot, k: int
                     ) -> list[tuple[float, ExperienceEntry]]:
        """(cosine similarity, entry) of the best ``k``, best first."""
        entries = eligible(snapshot)
        if not entries or k <= 0:
            return []
        query_vector: list[float] | None = None
        async with self._guard():  # concurrent ranks must not embed the same blobs twice
            known = {e.blob: self._cache[e.blob] for e in entries if e.blob in self._cache}
            missing = list({e.blob: e for e in entries if e.blob not in known}.values())
            if missing:
                vectors = await self._embed([query, *map(document_text, missing)])
                query_vector = vectors[0]
                fresh = dict(zip((e.blob for e in missing), vectors[1:], strict=True))
                known.update(fresh)
                _trim(self._cache, _CACHE_LIMIT - len(fresh))
                self._cache.update(fresh)
        if query_vector is None:
            query_vector = (await self._embed([query]))[0]
        try:
            scored = [(cosine(query_vector, known[e.blob]), e) for e in entries]
        except ValueError:
            raise LLMError("the embedding model returned vectors of different sizes "
                           "across calls") from None
        scored.sort(key=lambda item: (-item[0], item[1].name))
        return scored[:k]
