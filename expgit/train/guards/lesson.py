"""Checks of a lesson a model wrote before it becomes a gradient or a merge item.

* a secret (an API key, a token, a password...) in the lesson: refused, whatever the
  redactor could do, because a model that writes one was told to (a prompt injection);
* copying: the longest run of consecutive words the lesson shares with its sources (the
  case's input, the trajectory). GEPA users met reflection models that paste training
  phrases into the prompt; a run of ``[train] max_copied_words`` words or more is
  refused, half as many are flagged in the PR body;
* junk (``degenerate``, :func:`check_written`): a rationale, summary or body that loops,
  has no real words, only echoes the prompts' headings or is cut off
  (:mod:`expgit.train.guards.degeneracy`; the headings include those of the experiences the
  prompt showed), a summary that is an account of one run, a summary or a body of fewer
  than :data:`SUMMARY_WORDS` / :data:`BODY_WORDS` words, or an edit's rationale of fewer
  than :data:`RATIONALE_WORDS`; in the skills layout the summary is a SKILL.md's
  ``description``, junk too past the spec (over 1,024 characters, an XML tag);
* a skill name the Agent Skills rules refuse (``skill_name``, :func:`check_skill_name`:
  over 64 characters, outside the spec's charset, "claude" or "anthropic" in it);
* noise (``cosmetic``, :func:`check_change`): a change of whitespace, quotes, list style
  or YAML style only (:mod:`expgit.train.guards.cosmetic`);
* context collapse (``collapse``, :func:`check_change`): an update that removes half or
  more of the non-blank lines of the experience's body (lines of the current body found
  nowhere in the new one, :func:`expgit.store.workflow.changes.body_loss`), the failure ACE's paper
  names (a procedure and its pitfalls rewritten as one fluent sentence). A delete is an
  explicit delete, and the merge's budget compression (``compress``) is not checked;
* an attack on the agent (``injection``, :func:`check_lesson`): an instruction override,
  a download piped to a shell, secrets sent away, hidden characters...
  (:mod:`expgit.store.format.injection`).

:func:`expgit.train.guards.edit.guard_edit` runs these checks in one order, for the
gradient estimator (each edit) and the policy optimizer (each merge item) alike.

A reply whose every lesson was junk counts as a failed call of its stage, with the cause
:data:`DEGENERATE_REPLY` (:func:`count_degenerate_reply`), so the run exits 7 and says so.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from functools import lru_cache
from typing import Final, Literal

from expgit.core.redaction.text import redact_text, secrets_in
from expgit.errors import InvalidInputError
from expgit.llm.port import LLMOutputError
from expgit.llm.structured import StructuredLLM
from expgit.resources import data_dir
from expgit.store.format.injection import injection_problem
from expgit.store.format.skill_md import check_skill_name as check_spec_name
from expgit.store.format.skill_md import description_problem
from expgit.store.workflow.changes import body_loss
from expgit.train.guards.cosmetic import only_cosmetic
from expgit.train.guards.degeneracy import enough_words, headings_of, problem, summary_problem

_WORD = re.compile(r"\w+")
DEGENERATE: Final = "degenerate"
COSMETIC: Final = "cosmetic"
COLLAPSE: Final = "collapse"
INJECTION: Final = "injection"
SKILL_NAME: Final = "skill_name"
DEGENERATE_REPLY = "degenerate reply (only junk; the reasons are in the rejected edits)"
RATIONALE_WORDS = 3  # the fewest words of an edit's rationale that can say why
BODY_WORDS = 4  # the fewest words of a body that can state a rule
SUMMARY_WORDS = 4  # the fewest words of a summary that can say when and what to do
_NAME = re.compile(r"^name:\s*([a-z0-9-]+)\s*$", re.M)
RefusalKind = Literal["refused_secret", "refused_copy", "injection", "degenerate",
                      "cosmetic", "collapse", "skill_name"]


class LessonRefused(InvalidInputError):
    """A lesson refused by the guard; ``kind``: ``refused_secret``, ``refused_copy``,
    ``injection``, ``degenerate``, ``cosmetic``, ``collapse`` or ``skill_name``."""

    def __init__(self, message: str, kind: RefusalKind) -> None:
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
    body) holds a secret, an attack on the agent (``injection``) or copies ``max_words``
    words of a source; else a note for the PR body when it copies at least half as many,
    or None."""
    text = "\n".join(fields)
    kinds = secrets_in(text)
    if kinds:
        raise LessonRefused(f"refused: the lesson holds a secret ({', '.join(kinds)})",
                            "refused_secret")
    attack = injection_problem(text)
    if attack is not None:
        raise LessonRefused(attack, INJECTION)
    run = copied_words(text, sources, min(4, flag_threshold(max_words)))
    if run >= max_words:
        raise LessonRefused(f"refused: the lesson copies {run} consecutive words of its case "
                            f"or trajectory ([train] max_copied_words = {max_words})",
                            "refused_copy")
    if run >= flag_threshold(max_words):
        return f"copies {run} consecutive words of its case or trajectory"
    return None


@lru_cache(maxsize=1)
def prompt_echoes() -> frozenset[str]:
    """The headings of the packaged prompt templates (what a model that echoes its prompt
    writes back), normalised as :func:`expgit.train.guards.degeneracy.headings_of` does."""
    folder = data_dir("templates") / "prompts"
    return headings_of(path.read_text("utf-8") for path in sorted(folder.glob("*.j2")))


def written_problem(field: str, text: str, *, prose: bool = True, keywords: bool = False,
                    shown: frozenset[str] = frozenset()) -> str | None:
    """``"the <field>: <why>"`` when ``text`` is degenerate (a summary or a description:
    also an account of one run), else None. ``shown``: more headings the prompt showed (those of the
    experiences in it, :func:`headings_shown`) that the text may not only echo."""
    echoes = prompt_echoes() | shown
    found = (summary_problem(text, echoes=echoes) if field in ("summary", "description")
             else problem(text, echoes=echoes, prose=prose, keywords=keywords))
    return None if found is None else f"the {field}: {found}"


def headings_shown(texts: Iterable[str | None]) -> frozenset[str]:
    """The headings of the experience files a prompt showed, and their names, normalised
    (what a model that echoes its prompt copies from them)."""
    shown = [t for t in texts if t]
    names = [m.group(1) for t in shown for m in [_NAME.search(t)] if m is not None]
    return headings_of(shown) | {n.replace("-", " ") for n in names} | frozenset(names)


def check_written(*, rationale: str, summary: str, body: str,
                  rationale_required: bool = True,
                  shown: frozenset[str] = frozenset(), skills: bool = False) -> None:
    """Raise LessonRefused (``degenerate``) when a lesson's rationale, summary or body is
    junk (``shown``: see :func:`written_problem`); its summary too short to say when and
    what (fewer than :data:`SUMMARY_WORDS` real words) or its body to state a rule (fewer
    than :data:`BODY_WORDS`); or (``rationale_required``) its rationale says nothing
    (fewer than :data:`RATIONALE_WORDS`). ``skills``: the summary is a SKILL.md's
    description, named so, and junk too past the spec's bounds (over 1,024 characters,
    an XML tag: :func:`expgit.store.format.skill_md.description_problem`). The message quotes
    the junk, redacted."""
    what = "description" if skills else "summary"
    spec = description_problem(summary) if skills and summary else None
    found = None if spec is None else f"the {spec}"
    for field, text in (("rationale", rationale), (what, summary), ("body", body)):
        found = found or written_problem(field, text, shown=shown)
    short = [("rationale", rationale, RATIONALE_WORDS if rationale_required else 0,
              "say why"),
             (what, summary, SUMMARY_WORDS, "say when and what to do"),
             ("body", body, BODY_WORDS, "state a rule")]
    for field, text, least, purpose in short:
        if found is None and (text.strip() or field == "rationale") \
                and not enough_words(text, least):
            found = (f"the {field} {text.strip()[:60]!r} has too few words to {purpose} "
                     f"(fewer than {least})")
    if found is not None:
        raise LessonRefused(f"degenerate: {redact_text(found)[0]}", DEGENERATE)


def check_skill_name(name: str, path: str) -> None:
    """Raise LessonRefused (``skill_name``) when ``name`` breaks the Agent Skills rules
    for a name (its would-be SKILL.md ``path`` named): over 64 characters, not lowercase
    letters, digits and single hyphens, "claude" or "anthropic" in it."""
    try:
        check_spec_name(name, path)
    except InvalidInputError as exc:
        raise LessonRefused(f"refused: {exc.message}", SKILL_NAME) from None


def check_change(current: str | None, new: str, path: str = "") -> None:
    """Raise LessonRefused when ``new`` changes ``current`` (the file as it is, None for a
    new file; ``path``: the file's, which tells a SKILL.md) only in form (``cosmetic``),
    or removes half its body or more (``collapse``)."""
    if current is None:
        return
    if only_cosmetic(current, new, path):
        raise LessonRefused("cosmetic: the change is only whitespace, quotes, list or YAML "
                            "style", COSMETIC)
    loss = body_loss(current, new)
    if loss.collapses:
        raise LessonRefused(f"collapse: the update {loss} (half or more); delete the "
                            "experience explicitly or keep what still holds", COLLAPSE)


def count_degenerate_reply(llm: StructuredLLM, stage: str, why: str) -> None:
    """Count a reply of ``stage`` that held nothing but junk as a failed call (cause
    :data:`DEGENERATE_REPLY`), as an invalid reply is counted."""
    llm.meter.failed(stage, LLMOutputError(f"{stage}: {why}", cause=DEGENERATE_REPLY))
