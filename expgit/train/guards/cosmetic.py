"""Whether an edit of an experience file changes only its look, not what it says.

Two versions of a file are the same in substance when their front matter holds the same
data (so a flow list ``tags: [a, b]`` and the block list of the same tags are equal, as
are ``"yes"`` and ``'yes'``; the summary is compared in the body's form) and their
bodies are equal once each is brought to one form: no blank lines, no trailing spaces
or indentation, runs of spaces as one, every list item marked ``-`` (``*``, ``+``,
``1.``, ``1)`` alike), every quote mark ``"`` (straight, curly or single), ``__``/``_``
emphasis as ``**``/``*``. An edit that
differs from the current file only in those ways is dropped as ``cosmetic``: it would
give a reviewer a diff of noise.
"""

from __future__ import annotations

import re

from expgit.errors import InvalidInputError
from expgit.store.format.experience import FrontMatter, parse_experience

_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
_QUOTES = str.maketrans({"'": '"', "\u2018": '"', "\u2019": '"', "\u201c": '"',
                         "\u201d": '"'})
_EMPHASIS = re.compile(r"(?<!\w)__(\S.*?\S|\S)__(?!\w)|(?<!\w)_(\S.*?\S|\S)_(?!\w)")


def _emphasis(match: re.Match[str]) -> str:
    return f"**{match.group(1)}**" if match.group(1) is not None else f"*{match.group(2)}*"


def body_form(body: str) -> list[str]:
    """``body`` in the one form :mod:`expgit.train.guards.cosmetic` compares (its lines)."""
    lines = []
    for line in body.splitlines():
        line = " ".join(line.split())
        if not line:
            continue
        line = _ITEM.sub("- ", line).translate(_QUOTES)
        lines.append(_EMPHASIS.sub(_emphasis, line))
    return lines


def only_cosmetic(current: str, new: str, path: str = "") -> bool:
    """Whether ``new`` differs from ``current`` (two texts of one experience file at
    ``path``, which tells a SKILL.md, whose description is the summary) and only in form
    (see the module docstring); False when either cannot be parsed (the other checks
    refuse it)."""
    if current == new:
        return False
    try:
        old_exp, new_exp = parse_experience(current, path), parse_experience(new, path)
    except InvalidInputError:
        return False
    return (_front_form(old_exp.front_matter) == _front_form(new_exp.front_matter)
            and old_exp.spec_fields == new_exp.spec_fields
            and body_form(old_exp.body) == body_form(new_exp.body))


def _front_form(front: FrontMatter) -> dict[str, object]:
    """The front matter's data, its summary in the body's form (quotes, spaces)."""
    return front.model_dump() | {"summary": body_form(front.summary)}
