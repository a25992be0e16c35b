"""Bounded fields of the training LLM outputs, and the experience files built from them.

A model never writes a whole file inside a JSON string: it writes fields (name, summary,
tags, markdown body, ...), each bounded in the JSON Schema (``maxLength``, ``maxItems``,
``pattern``), and expgit builds the file (:func:`compose_experience`). A grammar-
constrained model (llama.cpp turns the schema into a grammar) cannot exceed the bounds,
so its reply terminates; OpenAI's ``json_schema`` mode sees them too.

Two kinds of bounds, both in the schema:

* hard (name, action, body, the number of edits/items): a reply over them is invalid
  and gets StructuredLLM's one repair round;
* soft (summaries, rationales, tags, the analyst's lists): validation clips an
  over-long value instead of refusing the reply, after its last whole sentence if it can
  (:func:`clip`; a clipped summary is still useful; a repair call is not worth it).

Every ``maxLength`` stays below llama.cpp's repetition limit (2000): llama-server's
converter writes it as ``char{0,N}``, and so does the embedded server's, once patched
(:mod:`expgit.llm.local_grammar`). A small local model gets smaller bounds
(``LOCAL_*``), sized so that a reply that fills every field still fits 1024 tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field

from expgit.errors import InvalidInputError
from expgit.store.format.experience import NAME_MAX, new_experience, parse_experience
from expgit.store.format.skill_md import NAME_MAX as SKILL_NAME_MAX
from expgit.store.format.skill_md import is_skill_path

BODY_CHARS_MAX = 1800  # below llama.cpp's limit of 2000 repetitions, with a margin
FRONT_MATTER_CHARS = 600  # room kept for the front matter within the token budget
CHARS_PER_TOKEN = 3  # conservative, for prompt budgets (SmolLM2: about 3.1 on prompts)
MIN_PART_CHARS = 200  # a transcript part is not cut shorter to fit a prompt
DESCRIPTION = "description"
_FENCED = re.compile(r"^\s*(`{3,}|~{3,})[\w-]*\n(.*?)\n\1\s*$", re.S)


@dataclass(frozen=True)
class EditLimits:
    """Bounds of what the estimator, merger and compressor write per experience."""

    max_edits: int = 3  # edits per estimate reply
    max_items: int = 24  # files changed per merge chunk, files per compress reply
    body_chars: int = BODY_CHARS_MAX
    summary_chars: int = 200
    rationale_chars: int = 400
    max_tags: int = 6
    tag_chars: int = 32
    max_ids: int = 64  # gradient ids cited by one merge item (and at most the chunk's)
    name_words: int = 12  # a name: up to this many words of up to word_chars characters
    word_chars: int = 40
    allow_delete: bool = True  # False: the action enums leave "delete" out
    # the skills layout: the edit's summary is the SKILL.md's ``description``, and the
    # reply's field is named so (:func:`summary_field`)
    skills: bool = False

    @property
    def name_pattern(self) -> str:
        """A slug (lowercase words joined by single hyphens) as a pattern llama.cpp's
        converter accepts (no "(?:"), with bounded words so that the grammar bounds the
        name too (there a pattern wins over maxLength); validation also applies
        maxLength (NAME_MAX)."""
        word = f"[a-z0-9]{{1,{self.word_chars}}}"
        return f"^{word}(-{word}){{0,{self.name_words - 1}}}$"

    def for_budget(self, token_budget: int) -> EditLimits:
        """These limits with the body capped so that a file fits ``token_budget``
        (about 4 characters per token, :data:`FRONT_MATTER_CHARS` kept for the front
        matter) and below llama.cpp's limit."""
        body = min(self.body_chars, token_budget * 4 - FRONT_MATTER_CHARS, BODY_CHARS_MAX)
        return replace(self, body_chars=max(body, 200))

    def for_layout(self, kind: str) -> EditLimits:
        """These limits for a repository of layout ``kind`` ("flat" or "skills")."""
        return replace(self, skills=kind == "skills")


@dataclass(frozen=True)
class AnalysisLimits:
    """Bounds of the analyst's reply (one trajectory)."""

    title_chars: int = 100
    summary_chars: int = 600
    item_chars: int = 200  # one key step, mistake or lesson
    max_key_steps: int = 10
    max_mistakes: int = 5
    max_lessons: int = 5
    anchor_chars: int = 150


NAME_PATTERN = EditLimits().name_pattern

# A small local model: one short edit per trajectory, a compact analysis. A reply that
# fills every bound (:func:`worst_case_chars`) stays under LOCAL_REPLY_CHARS characters, so
# it fits the local model's reply cap (2048 tokens) even at one token per character (a
# degenerate reply of digits, measured: SmolLM2 tokenizes them one by one). It may add
# and rewrite experiences, never delete one (measured: SmolLM2-135M picks "delete" for
# files that do not exist, or would drop good ones).
LOCAL_REPLY_CHARS = 2000
LOCAL_EDIT_LIMITS = EditLimits(max_edits=1, max_items=1, body_chars=900, summary_chars=160,
                               rationale_chars=240, max_tags=4, tag_chars=24, max_ids=4,
                               name_words=6, word_chars=20, allow_delete=False)
LOCAL_ANALYSIS_LIMITS = AnalysisLimits(title_chars=80, summary_chars=240, item_chars=120,
                                       max_key_steps=4, max_mistakes=3, max_lessons=3,
                                       anchor_chars=100)
LOCAL_RELEVANT_EXPERIENCES = 3  # experiences shown to the estimator
LOCAL_SIMILAR_EXPERIENCES = 2  # similar files shown to the merger


_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters: after its last full sentence when that keeps
    at least half of them (a clipped summary still reads whole), else at a word with "…"
    (which the degeneracy guard then refuses to commit as cut off)."""
    if len(text) <= limit:
        return text
    ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, limit + 1) if m.end() <= limit]
    if ends and ends[-1] >= limit // 2:
        return text[:ends[-1]]
    head = text[:limit - 1]
    cut = head.rfind(" ")
    return (head[:cut] if cut >= limit // 2 else head).rstrip() + "…"


def _clip_text(limit: int) -> BeforeValidator:
    return BeforeValidator(lambda v: clip(v, limit) if isinstance(v, str) else v)


def _clip_list(limit: int) -> BeforeValidator:
    return BeforeValidator(lambda v: v[:limit] if isinstance(v, list) else v)


def _unit(value: Any) -> Any:
    """A number outside [0, 1] clamped into it (a model's 2 or -1 is not worth a repair
    round)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return min(1.0, max(0.0, float(value)))
    return value


Confidence = Annotated[float, Field(ge=0, le=1), BeforeValidator(_unit)]  # this order: the
# schema says minimum/maximum (the other order emits unknown "ge"/"le" keys)


def soft_text(limit: int, min_length: int = 0) -> Any:
    """A string type clipped to ``limit`` characters; the schema says ``maxLength``."""
    field = (Field(max_length=limit, min_length=min_length) if min_length
             else Field(max_length=limit))
    return Annotated[str, _clip_text(limit), field]


def soft_list(item_chars: int, max_items: int) -> Any:
    """A list of strings, each clipped to ``item_chars``, the list to ``max_items``."""
    return Annotated[list[soft_text(item_chars)], _clip_list(max_items),  # type: ignore[misc]
                     Field(max_length=max_items)]


def summary_field(limits: EditLimits) -> tuple[Any, Any]:
    """The ``summary`` field of an edit reply model (``create_model``'s ``(type,
    default)``): a soft text, named ``description`` in the reply (and its JSON Schema)
    in the skills layout, where it becomes the SKILL.md's description."""
    text = soft_text(limits.summary_chars)
    return (text, Field(alias=DESCRIPTION) if limits.skills else ...)


def name_max(limits: EditLimits) -> int:
    """The longest name the prompts allow: the Agent Skills spec's 64 characters in the
    skills layout (a longer one is dropped by the lesson guard), else expgit's."""
    return SKILL_NAME_MAX if limits.skills else NAME_MAX


def name_field(limits: EditLimits) -> Any:
    return Annotated[str, Field(max_length=NAME_MAX, pattern=limits.name_pattern)]


def body_field(limit: int) -> Any:
    return Annotated[str, Field(max_length=limit)]


def strip_titles(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` of the output models: no per-field titles ("Title",
    "Summary", ...), which only lengthen the schema and which a small model, reading the
    schema in its prompt, copies into its answer. Fields are described by the prompt."""
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)


_NUMBER_CHARS = 52  # llama.cpp's number: sign, 16 digits, ".", 16 digits, "e", sign, 16
_PATTERN_REPEAT = re.compile(r"\{(\d+),(\d+)\}")


def _pattern_chars(pattern: str) -> int:
    """The longest match of one of our patterns: ``^W(-W){0,n}$`` with ``W`` a bounded
    word (the only shape used), else an error."""
    match = re.fullmatch(r"\^\[[^\]]+\]\{1,(\d+)\}\(-\[[^\]]+\]\{1,\d+\}\)\{0,(\d+)\}\$",
                         pattern)
    if match is None:
        raise ValueError(f"cannot size the pattern {pattern!r}")
    word, more = int(match.group(1)), int(match.group(2))
    return word + more * (word + 1)


def worst_case_chars(schema: dict[str, Any], root: dict[str, Any] | None = None) -> int:
    """The longest JSON text a grammar built from ``schema`` allows, in characters
    (each string character counted once: escapes aside); ValueError for an unbounded
    part. A reply that fills every bound is this long."""
    root = root or schema
    if "$ref" in schema:
        return worst_case_chars(root["$defs"][schema["$ref"].rsplit("/", 1)[1]], root)
    if "enum" in schema or "const" in schema:
        return max(len(json.dumps(v)) for v in schema.get("enum", [schema.get("const")]))
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return 2 + sum(len(json.dumps(k)) + 4 + worst_case_chars(v, root)
                       for k, v in props.items())
    if kind == "array":
        if "maxItems" not in schema:
            raise ValueError("an array without maxItems")
        return 2 + int(schema["maxItems"]) * (worst_case_chars(schema["items"], root) + 2)
    if kind == "string":
        if "pattern" in schema:
            return 2 + _pattern_chars(schema["pattern"])
        if "maxLength" not in schema:
            raise ValueError("a string without maxLength")
        return 2 + int(schema["maxLength"])
    if kind in ("number", "integer"):
        return _NUMBER_CHARS
    raise ValueError(f"cannot size the schema {schema}")


def schema_chars(output: type[BaseModel]) -> int:
    return len(json.dumps(output.model_json_schema(), separators=(",", ":")))


def fits(budget_tokens: int | None, output: type[BaseModel], *texts: str) -> bool:
    """Whether a prompt of ``texts`` (plus the schema, which StructuredLLM may append)
    fits ``budget_tokens`` at :data:`CHARS_PER_TOKEN`; always, without a budget."""
    if budget_tokens is None:
        return True
    chars = sum(len(t) for t in texts) + schema_chars(output)
    return chars <= budget_tokens * CHARS_PER_TOKEN


def fit_prompt(render: Callable[[int, int | None], tuple[str, str]], budget: int | None,
               output: type[BaseModel], shown: int = 0, longest: int = 0
               ) -> tuple[str, str, int]:
    """``render(shown, limit)``'s (system, user) made to fit ``budget`` (:func:`fits`):
    the last (least relevant) of ``shown`` items dropped first, then every transcript part
    cut to ``limit`` characters, halving from ``longest`` down to :data:`MIN_PART_CHARS`
    (``limit`` None: uncut); the smallest prompt if none fits. Also: the items kept."""
    limit: int | None = None
    while True:
        system, user = render(shown, limit)
        cut = longest if limit is None else limit
        if fits(budget, output, system, user) or (not shown and cut <= MIN_PART_CHARS):
            return system, user, shown
        if shown:
            shown -= 1
        else:
            limit = max(MIN_PART_CHARS, cut // 2)


def fence(text: str) -> str:
    """A backtick fence longer than any backtick run in ``text`` (at least four)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(4, longest + 1)


def without_front_matter(text: str) -> str:
    """A document's text after its YAML front matter (all of it if it has none)."""
    end = text.find("\n---\n", 4) if text.startswith("---\n") else -1
    return text[end + 5:] if end > 0 else text


def normalise_body(text: str) -> str:
    """A markdown body as the model wrote it, without a fence around the whole of it or a
    front matter block it should not have written, ending in one newline ("" if empty)."""
    match = _FENCED.match(text)
    body = without_front_matter(match.group(2) if match else text).strip("\n")
    return body + "\n" if body.strip() else ""


def clean_tags(tags: list[str]) -> list[str]:
    """Tags stripped, lowercased, spaces as hyphens, empty ones and repeats dropped."""
    out = [re.sub(r"\s+", "-", t.strip().lower()) for t in tags]
    return [t for t in dict.fromkeys(out) if t]


def compose_experience(name: str, current: str | None, *, summary: str, tags: list[str],
                       body: str, path: str) -> str:
    """The file an edit describes. ``current`` None: a new active experience (with an
    empty body but a summary, the body is a title and the summary), an Agent Skills
    SKILL.md when ``path`` is one (the skills layout: the summary is its description,
    which a new skill must have). Otherwise the current file with its front matter kept
    (verbatim when summary and tags are unchanged); an empty ``summary``, ``tags`` or
    ``body`` keeps the current one. Raises InvalidInputError (a new file with neither
    body nor summary, a new skill without a description, an unreadable current file)."""
    body = normalise_body(body)
    summary = " ".join(summary.split())
    tags = clean_tags(tags)
    if current is None:
        skill = is_skill_path(path)
        if skill and not summary:
            raise InvalidInputError("a new skill needs a description: what it does and "
                                    "when to use it")
        if not body and not summary:
            raise InvalidInputError("a new experience needs a body (or at least a summary)")
        body = body or f"# {name.replace('-', ' ').capitalize()}\n\n{summary}\n"
        return new_experience(name, body, summary=summary, tags=tags, skill=skill).render()
    exp = parse_experience(current, path)
    changes: dict[str, Any] = {}
    if summary and summary != exp.front_matter.summary:
        changes["summary"] = summary
    if tags and tags != exp.front_matter.tags:
        changes["tags"] = tags
    if changes:
        exp = exp.with_fields(**changes)
    if body:
        exp = exp.model_copy(update={"body": body})
    return exp.render()
