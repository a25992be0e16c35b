"""Experience files: ``<root>/<name>.md`` with YAML front matter and a markdown body.

An unchanged file round-trips byte for byte: :func:`parse_experience` keeps the raw
front matter and body, and :meth:`Experience.render` re-emits them untouched unless a
field was changed through :meth:`Experience.with_fields`, and then only that field's
lines change.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from expgit.errors import InvalidInputError
from expgit.store.format import skill_md, yamldump
from expgit.store.format.front_matter import replace_fields
from expgit.store.format.yamlload import UniqueKeyLoader

Status = Literal["active", "draft", "deprecated"]
NAME_MAX = 80
_NAME_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")  # the whole name: fullmatch
_FENCE = "---"


class _Loader(UniqueKeyLoader):
    """Front matter: repeated fields are refused; repeated ``<<`` merges are allowed."""

    key_word = "field"
    repeated_merge_keys = True


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid experience name, else raise InvalidInputError."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError("experience name is empty")
    if len(name) > NAME_MAX:
        raise InvalidInputError(
            f"experience name is {len(name)} characters long, the limit is {NAME_MAX}: "
            f"{name[:40]}...")
    if not _NAME_RE.fullmatch(name):  # match and $ would let "name\n" through
        raise InvalidInputError(
            f"invalid experience name {name!r}: use lowercase letters, digits and single "
            "hyphens (a slug such as 'refund-method-rules')")
    return name


def estimate_tokens(text: str) -> int:
    """Estimated token count: about four UTF-8 bytes per token (no tokenizer download)."""
    return tokens_of_bytes(len(text.encode("utf-8")))


def tokens_of_bytes(size: int) -> int:
    """:func:`estimate_tokens` of a text of ``size`` UTF-8 bytes."""
    return (size + 3) // 4


class FrontMatter(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    status: Status = "active"
    summary: str = ""
    tags: list[str] = Field(default_factory=list)
    always: bool = False  # always in the agent's context, whatever the request
    metadata: dict[str, object] = Field(default_factory=dict, description=(
        "the front matter's other metadata, the author's own YAML values, kept as written"))

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        try:
            return check_name(value)
        except InvalidInputError as exc:
            raise ValueError(exc.message) from None

    @field_validator("summary", mode="before")
    @classmethod
    def _summary_text(cls, value: Any) -> Any:
        return "" if value is None else value


class Experience(BaseModel):
    """One parsed experience file. ``raw_front_matter`` and ``body`` are kept verbatim."""

    model_config = ConfigDict(frozen=True)

    front_matter: FrontMatter
    body: str
    raw_front_matter: str | None = None
    # False only for a parsed file that ends right after its closing '---' (no newline),
    # so that such a file still renders back byte for byte.
    closing_newline: bool = True
    # an Agent Skills SKILL.md (:mod:`expgit.store.format.skill_md`): the spec's keys that expgit
    # has no field for (license, compatibility, allowed-tools); None: a flat <name>.md
    spec_fields: dict[str, str] | None = None

    @property
    def name(self) -> str:
        return self.front_matter.name

    @property
    def status(self) -> Status:
        return self.front_matter.status

    def with_fields(self, **fields: Any) -> Experience:
        """A copy with some front matter fields changed; raises InvalidInputError. The
        fields left alone keep their exact text (:func:`expgit.store.format.front_matter.
        replace_fields`) when the file was parsed and that text reads back right;
        otherwise the whole front matter is written anew."""
        data = self.front_matter.model_dump() | fields
        try:
            fm = FrontMatter.model_validate(data)
        except ValidationError as exc:
            raise InvalidInputError(
                f"{self.name}: invalid front matter: {_problems(exc)}") from None
        return Experience(front_matter=fm, body=self.body,
                          raw_front_matter=self._raw_with(fm),
                          closing_newline=self.closing_newline, spec_fields=self.spec_fields)

    def _raw_with(self, fm: FrontMatter) -> str | None:
        """This file's front matter text with the fields that differ in ``fm``
        rewritten, others kept byte for byte; None if that cannot be done faithfully."""
        if self.raw_front_matter is None:
            return None
        new = fm.model_dump()
        old = self.front_matter.model_dump()
        changed = {k: v for k, v in new.items() if v != old[k]}
        raw = (replace_fields(self.raw_front_matter, changed) if self.spec_fields is None
               else skill_md.replace_spec(self.raw_front_matter, old, new))
        if raw is None:
            return None
        try:
            data = yaml.load(raw, Loader=_Loader)
            if self.spec_fields is not None:
                data = skill_md.to_fields(data, raw, skill_md.SKILL_FILE)[0]
            back = FrontMatter.model_validate(data)
        except (yaml.YAMLError, ValidationError, InvalidInputError, AttributeError):
            return None
        return raw if back == fm else None

    def render(self) -> str:
        fm = self.raw_front_matter
        if fm is None and self.spec_fields is not None:
            fm = skill_md.dump(self.front_matter.model_dump(), self.spec_fields)
        elif fm is None:
            fm_ = self.front_matter
            data = fm_.model_dump(exclude=None if fm_.always else {"always"})
            fm = yamldump.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)
        closing = "\n" if self.closing_newline or self.body else ""
        return f"{_FENCE}\n{fm}{_FENCE}{closing}{self.body}"


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'front matter'}: {err['msg']}"
        for err in exc.errors())


def new_experience(name: str, body: str, *, status: Status = "active", summary: str = "",
                   tags: list[str] | None = None, skill: bool = False) -> Experience:
    """A new experience; ``skill``: rendered as an Agent Skills SKILL.md."""
    fm = FrontMatter(name=check_name(name), status=status, summary=summary, tags=tags or [])
    return Experience(front_matter=fm, body=body if body.endswith("\n") else body + "\n",
                      spec_fields={} if skill else None)


def in_layout(exp: Experience, skill: bool, path: str) -> Experience:
    """``exp`` as the other layout holds it: an Agent Skills SKILL.md (``skill``) or a
    flat ``<name>.md``, with the SKILL.md codec's mapping (``summary`` <-> ``description``,
    ``status``, ``tags`` and ``always`` <-> ``metadata.expgit-*``); ``exp`` itself when it
    is already that. ``path`` (the file it came from) names it in errors; the caller
    checks what the result renders to against the rules of its new place."""
    if (exp.spec_fields is not None) == skill:
        return exp
    if not skill and exp.spec_fields:
        raise InvalidInputError(
            f"{path}: {', '.join(sorted(exp.spec_fields))} "
            "has no place in a flat experience file", hint="use the skills layout")
    if skill and any("," in tag for tag in exp.front_matter.tags):
        raise InvalidInputError(f"{path}: a tag contains a comma, and a SKILL.md keeps "
                                f"the tags comma-separated in metadata.{skill_md.TAGS}")
    return Experience(front_matter=exp.front_matter, body=exp.body,
                      spec_fields={} if skill else None)


def decode_experience(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def parse_experience(text: str, path: str) -> Experience:
    """Parse an experience file's text; ``path`` only labels error messages."""
    if text.startswith("\ufeff"):
        raise InvalidInputError(f"{path}: starts with a byte order mark (BOM); save the file "
                                "as UTF-8 without BOM")
    if text.startswith(_FENCE + "\r\n"):
        raise InvalidInputError(f"{path}: uses CRLF (Windows) line endings; save the file "
                                "with LF line endings")
    if not text.startswith(_FENCE + "\n"):
        raise InvalidInputError(f"{path}: missing front matter: the file must start with "
                                "a '---' line, YAML fields, and a closing '---' line")
    end = text.find(f"\n{_FENCE}\n", len(_FENCE))
    closing_newline = True
    if end < 0:
        if text.endswith(f"\n{_FENCE}"):
            end = len(text) - len(_FENCE) - 1
            closing_newline = False
        else:
            raise InvalidInputError(f"{path}: front matter is not closed by a '---' line")
    raw = text[len(_FENCE) + 1 : end + 1]
    body = text[end + len(_FENCE) + 2 :]
    try:
        data = yaml.load(raw, Loader=_Loader)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 2})" if where is not None else ""
        problem = getattr(exc, "problem", None)
        what = f": {problem}" if problem else ""
        raise InvalidInputError(f"{path}: front matter is not valid YAML{line}{what}"
                                ) from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path}: front matter must be a YAML mapping of fields")
    spec_fields = None
    if skill_md.is_skill_path(path):  # an Agent Skills folder's SKILL.md
        data, spec_fields = skill_md.to_fields(data, raw, path)
    try:
        fm = FrontMatter.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(f"{path}: invalid front matter: {_problems(exc)}") from None
    return Experience(front_matter=fm, body=body, raw_front_matter=raw,
                      closing_newline=closing_newline, spec_fields=spec_fields)


def check_experience(text: str, path: str, stem: str, token_budget: int) -> Experience:
    """Parse and check one file against every per-file rule: schema, name = stem, budget."""
    exp = parse_experience(text, path)
    check_fit(exp.name, estimate_tokens(text), path, stem, token_budget)
    return exp


def check_fit(name: str, tokens: int, path: str, stem: str, token_budget: int) -> None:
    """The per-file rules beyond the schema: the front matter name is the file name, and
    the file (``tokens`` estimated) is within the token budget."""
    if name != stem and skill_md.is_skill_path(path):
        raise InvalidInputError(
            f"{path}: front matter name {name!r} differs from the folder name {stem!r}",
            hint=f"rename the folder to {name} or set name: {stem}")
    if name != stem:
        raise InvalidInputError(
            f"{path}: front matter name {name!r} differs from the file name {stem!r}",
            hint=f"rename the file to {name}.md or set name: {stem}")
    if tokens > token_budget:
        raise InvalidInputError(
            f"{path}: about {tokens} tokens, over the budget of {token_budget} per experience",
            hint="split the experience or shorten it; the budget is token_budget in expgit.toml")
