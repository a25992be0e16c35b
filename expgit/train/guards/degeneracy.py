"""The degeneracy guard: text a model wrote that is junk, found without a model.

A small model (SmolLM2-135M, the embedded one) under a grammar always answers with valid
JSON, but what it writes in the strings is often junk: a phrase repeated until the
length bound ("Mia Li, Mia Li, Mia Li, ..."), digits and dots ("1.2.3.5.0"), the prompt's
own headings ("## Transcript", "Procedure:"), or a text cut off in the middle. Such text
must never become a gradient, a proposal or a stored trajectory. The rules, in the order
they are tried (the first that holds names the problem):

* **no real words**: not one word of two letters or more (with a vowel, for ASCII words;
  a Chinese, Japanese or Korean character is a word);
* **loops**: one n-gram of up to 8 words repeated 3 times in a row or more, covering 6
  words or more, or one of 4 words or more said twice in a row (or the same letter or
  digit 16 times in a row); a line of 3 words or more said 3 times; or a text of 24 words
  or more whose 3-word sequences are less than 40% distinct;
* **echoes the prompt**: every line is a heading or a field name of the prompts (``echoes``,
  see :func:`headings_of`) or empty once markup and ``<placeholders>`` are removed;
* **cut off**: it ends with "…" or "...", inside an unclosed code fence, bracket or
  inline code span, on a lowercase word no sentence ends with ("the", "and", "to", ...),
  after a finished sentence with one that is not (no ".", "!" or "?" at the end of its
  last line), or (``prose`` only: not a title or keywords) on a comma, a colon or a dash.

:func:`summary_problem` adds the rule of an experience's summary: it says when the
experience applies and what to do, so one with a sentence that starts by telling what the
agent or the user did (past tense: "The agent cancelled...", "The user asked..."), or
with "In this run", is an account of one run, not a summary.

Every function here is pure: text in, a short reason (or None) out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_LETTERS = re.compile(r"[^\W\d_]{2,}")
_VOWEL = re.compile(r"[aeiouy]", re.I)
_IDEOGRAPH = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_TOKEN = re.compile(r"\w+")
_CHAR_LOOP = re.compile(r"([^\W_])\1{15,}")
_FENCE_LINE = re.compile(r"^\s*(`{3,}|~{3,})", re.M)
_MARKUP = re.compile(r"^[\s#>*+\-|]*(?:\d+[.)]\s*)?")
_PLACEHOLDER = re.compile(r"<[^<>]*>|\{\{.*?\}\}|\{%.*?%\}|\([^()]*\)")
_PAIRS = {"(": ")", "[": "]", "{": "}"}
_DANGLING = frozenset((  # words no sentence ends with ("for", "in", "so" may: "ask for")
    "a", "an", "the", "and", "or", "but", "nor", "of", "to", "at", "into", "onto", "than",
    "because", "whether", "unless", "its", "their", "your", "our", "my", "whose"))
_FINISHED_THEN_MORE = re.compile(r"[^\W\d_]{2}[.!?]\s+[A-Z]")  # "... ago. No ..."
_FINISHED_END = tuple('.!?)"\'`*]…')
_DANGLING_MARKS = (",", ":", ";", "-", "\u2013", "\u2014", "(", "/", "&")
MAX_NGRAM = 8
LOOP_REPEATS = 3
LOOP_WORDS = 6
LONG_NGRAM = 4  # a sequence of this many words said twice in a row is a loop too
LINE_REPEATS = 3
DISTINCT_MIN_WORDS = 24
DISTINCT_TRIGRAMS = 0.4

# What the prompts show besides their headings: the reply's field names (``description``
# is the summary's in the skills layout), the roles of a transcript, and the body
# skeleton the edit rules describe ("# <Title>", "When: <situation>", "Procedure:",
# "Pitfalls:"; "Verify:" in the skills layout, a heading of the prompts).
FIXED_ECHOES = frozenset({
    "title", "outcome", "summary", "key steps", "key_steps", "mistakes", "lessons",
    "retrieval anchor", "retrieval_anchor", "edits", "name", "action", "rationale",
    "tags", "body", "confidence", "items", "gradient ids", "gradient_ids", "system",
    "description",
    "user", "assistant", "tool", "when", "procedure", "pitfalls", "situation",
    "estimatededit", "estimateoutput", "mergeitem", "mergeoutput", "analyzeoutput",
    "reflectoutput", "defs", "properties", "json", "none", "null", "n/a", "todo"})

_SENTENCES = re.compile(r"(?<=[.!?;])\s+")
_RUN_START = re.compile(
    r"^\W*(?:(?:in|during|throughout) (?:this|the) (?:run|conversation|session|chat|"
    r"transcript|task|interaction)\b"
    r"|(?:here|this run|this time),? "
    r"|(?:the|this|our) (?:ai |support )?(?:agent|assistant|model|bot|user|customer|"
    r"caller|passenger|traveller|traveler)\b(?:\s+(?:\w+ly|then|also|first|never|not|has|"
    r"have|had|was|were))?\s+"
    r"(?:\w+ed|was|were|did|had|got|made|said|told|gave|took|went|sent|found|chose|knew|"
    r"thought|began|ran|saw|came|paid|left|kept|wrote|bought|flew|spoke|forgot|"
    r"understood|met|lost|brought|sought|felt|heard|meant|won|broke|gotten|done|been)\b)",
    re.I)


def words(text: str) -> list[str]:
    """The real words of ``text``: runs of two letters or more, lowercased; an ASCII one
    needs a vowel ("mvp" and "xyz" are not words of prose); in scripts written without
    spaces (Chinese, Japanese, Korean) every character counts as a word."""
    found: list[str] = []
    for run in _LETTERS.findall(text):
        if _IDEOGRAPH.search(run):
            found += list(run)
        elif not run.isascii() or _VOWEL.search(run):
            found.append(run.lower())
    return found


def normalised_line(line: str) -> str:
    """A line as the echo rule compares it: without list and heading markup, numbering,
    ``<placeholders>``, template expressions and parentheses, quotes and backticks, final
    punctuation; lowercased, single spaces."""
    line = _PLACEHOLDER.sub(" ", _MARKUP.sub("", line))
    line = line.replace("`", " ").replace('"', " ").replace("*", " ")
    return " ".join(line.split()).strip(" :.,;-|").lower()


def headings_of(templates: Iterable[str]) -> frozenset[str]:
    """The headings of prompt templates, normalised (:func:`normalised_line`): their
    markdown headings and their lines that end with a colon ("Rules:"), template
    comments left out."""
    found: set[str] = set()
    for text in templates:
        text = re.sub(r"\{#.*?#\}", "", text, flags=re.S)
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("#") or (stripped.endswith(":") and len(stripped) < 60):
                heading = normalised_line(stripped)
                if heading:
                    found.add(heading)
    return frozenset(found)


def _ngram_loop(tokens: list[str]) -> str | None:
    for n in range(1, MAX_NGRAM + 1):
        i = 0
        while i + 2 * n <= len(tokens):
            gram = tokens[i:i + n]
            reps = 1
            while tokens[i + reps * n:i + (reps + 1) * n] == gram:
                reps += 1
            if (reps >= LOOP_REPEATS and reps * n >= LOOP_WORDS) \
                    or (reps >= 2 and n >= LONG_NGRAM):
                return f"it loops: {' '.join(gram)!r} {reps} times in a row"
            i += max(1, (reps - 1) * n) if reps > 1 else 1
    return None


def loop_problem(text: str) -> str | None:
    """Why ``text`` loops (see the module docstring), or None."""
    char = _CHAR_LOOP.search(text)
    if char:
        return f"it loops: {char.group(1)!r} {len(char.group(0))} times in a row"
    tokens = [t.lower() for t in _TOKEN.findall(text)]
    found = _ngram_loop(tokens)
    if found:
        return found
    lines = [" ".join(line.split()).lower() for line in text.splitlines()]
    counts: dict[str, int] = {}
    for line in lines:
        if len(_TOKEN.findall(line)) >= 3:
            counts[line] = counts.get(line, 0) + 1
    repeated = [line for line, n in counts.items() if n >= LINE_REPEATS]
    if repeated:
        return f"it loops: the line {repeated[0][:60]!r} {counts[repeated[0]]} times"
    if len(tokens) >= DISTINCT_MIN_WORDS:
        trigrams = [tuple(tokens[i:i + 3]) for i in range(len(tokens) - 2)]
        distinct = len(set(trigrams)) / len(trigrams)
        if distinct < DISTINCT_TRIGRAMS:
            return f"it loops: only {distinct:.0%} of its 3-word sequences differ"
    return None


def echo_problem(text: str, echoes: frozenset[str]) -> str | None:
    """Why ``text`` only echoes the prompt (every line a heading of ``echoes`` or
    :data:`FIXED_ECHOES`, or empty once normalised, one at least a heading), or None."""
    lines = [normalised_line(line) for line in text.splitlines() if line.strip()]
    said = [line for line in lines if line]
    if said and all(line in echoes or line in FIXED_ECHOES for line in said):
        return f"it echoes the prompt's headings ({', '.join(dict.fromkeys(said))[:60]})"
    return None


def _unclosed(text: str) -> str | None:
    """An unclosed code fence, bracket or inline code span of ``text``, or None."""
    if len(_FENCE_LINE.findall(text)) % 2:
        return "a code fence"
    outside = re.sub(r"^\s*(`{3,}|~{3,}).*?^\s*\1", "", text, flags=re.S | re.M)
    if outside.count("`") % 2:
        return "an inline code span"
    stack: list[str] = []
    for char in outside:
        if char in _PAIRS:
            stack.append(_PAIRS[char])
        elif char in _PAIRS.values() and stack and stack[-1] == char:
            stack.pop()
    return f"a {'bracket' if stack[-1] != ')' else 'parenthesis'}" if stack else None


def cut_problem(text: str, prose: bool = True) -> str | None:
    """Why ``text`` looks cut off (see the module docstring), or None."""
    end = text.rstrip()
    if end.endswith(("…", "...")):
        return "it is cut off (it ends with an ellipsis)"
    unclosed = _unclosed(end)
    if unclosed:
        return f"it is cut off (inside {unclosed})"
    if prose and end.endswith(_DANGLING_MARKS):
        return f"it is cut off (it ends on {end[-1]!r})"
    line = end.rsplit("\n", 1)[-1]
    if _FINISHED_THEN_MORE.search(line) and not line.endswith(_FINISHED_END):
        return "it is cut off (its last sentence is not finished)"
    last = _TOKEN.findall(end[-40:])
    if last and end[-1].isalnum() and last[-1] in _DANGLING:  # "rule A" is whole
        return f"it is cut off (it ends on {last[-1]!r})"
    return None


def problem(text: str, *, echoes: frozenset[str] = frozenset(), prose: bool = True,
            keywords: bool = False) -> str | None:
    """Why ``text`` is degenerate, in a few words, or None (also for an empty text:
    whether a field may be empty is not this guard's rule). ``prose``: a sentence or a
    markdown body, which may not end on a comma, a colon or a dash (a title may).
    ``keywords``: words for retrieval that no reviewer reads as text (a retrieval
    anchor): a loop, no real words or an echo still make them junk, but a cut-off end
    loses nothing."""
    if not text.strip():
        return None
    if not words(text):
        return "it has no real words"
    return (loop_problem(text) or echo_problem(text, echoes)
            or (None if keywords else cut_problem(text, prose)))


def run_account(summary: str) -> bool:
    """Whether a sentence of ``summary`` starts as an account of one run (see the module
    docstring)."""
    return any(_RUN_START.match(sentence) for sentence in _SENTENCES.split(summary))


def summary_problem(summary: str, *, echoes: frozenset[str] = frozenset()) -> str | None:
    """Why ``summary`` is not an experience's summary (degenerate, cut off, or an account
    of one run), or None."""
    found = problem(summary, echoes=echoes)
    if found is None and run_account(summary):
        found = ("it is an account of one run, not when the experience applies and what "
                 "to do")
    return found


def enough_words(text: str, least: int) -> bool:
    """Whether ``text`` holds at least ``least`` real words."""
    return len(words(text)) >= least
