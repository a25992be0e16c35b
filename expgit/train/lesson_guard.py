"""Checks of a lesson a model wrote before it becomes a gradient or a merge item.

* a secret (an API key, a token, a password...) in the lesson: refused, whatever the
  redactor could do, because a model that writes one was told to (a prompt injection);
* copying: the longest run of consecutive words the lesson shares with its sources (the
  case's input, the trajectory). GEPA users met reflection models that paste training
  phrases into the prompt; a run of ``[train] max_copied_words`` words or more is
  refused, half as many are flagged in the PR body.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from expgit.errors import InvalidInputError
from expgit.store.redact import secrets_in

_WORD = re.compile(r"\w+")


class LessonRefused(InvalidInputError):
    """A lesson refused by the guard; ``kind``: ``refused_secret`` or ``refused_copy``."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def copied_words(text: str, sources: Iterable[str], shortest: int = 4) -> int:
    """The length of the longest run of consecutive words of ``text`` found word for
    word in one of ``sources`` (0 below ``shortest`` words)."""
    mine = words(text)
    best = 0
    for source in sources:
        theirs = words(source)
        starts: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for j in range(len(theirs) - shortest + 1):
            starts[tuple(theirs[j:j + shortest])].append(j)
        for i in range(len(mine) - shortest + 1):
            for j in starts.get(tuple(mine[i:i + shortest]), ()):
                n = shortest
                while i + n < len(mine) and j + n < len(theirs) and mine[i + n] == theirs[j + n]:
                    n += 1
                best = max(best, n)
    return best


def flag_threshold(max_words: int) -> int:
    return max(2, max_words // 2)


def check_lesson(fields: Iterable[str], sources: Iterable[str], max_words: int
                 ) -> str | None:
    """Raise LessonRefused when the lesson (its ``fields``: name, summary, tags,
    body) holds a secret or copies ``max_words`` words of a source; else a note for the
    PR body when it copies at least half as many, or None."""
    text = "\n".join(fields)
    kinds = secrets_in(text)
    if kinds:
        raise LessonRefused(f"refused: the lesson holds a secret ({', '.join(kinds)})",
                            "refused_secret")
    run = copied_words(text, sources, min(4, flag_threshold(max_words)))
    if run >= max_words:
        raise LessonRefused(f"refused: the lesson copies {run} consecutive words of its case "
                            f"or trajectory ([train] max_copied_words = {max_words})",
                            "refused_copy")
    if run >= flag_threshold(max_words):
        return f"copies {run} consecutive words of its case or trajectory"
    return None
