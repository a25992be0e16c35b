"""The front matter of an Agent Skills ``SKILL.md`` (agentskills.io specification), mapped
to and from expgit's own fields.

The front matter holds only the spec's keys: ``name``, ``description``, ``license``,
``compatibility``, ``metadata`` (a map of strings to strings) and ``allowed-tools``.
expgit's fields live in ``metadata``::

    summary  <->  description
    status   <->  metadata.expgit-status   (active | draft | deprecated)
    tags     <->  metadata.expgit-tags     (comma-separated)
    always   <->  metadata.expgit-always   ("true" | "false")

Other ``metadata`` keys are expgit's ``metadata`` field, kept as they are; ``license``,
``compatibility`` and ``allowed-tools`` are kept aside (:func:`to_fields`). An unchanged
file keeps its bytes (the caller keeps the raw text); a changed field rewrites only its
lines (:func:`replace_spec`), inside ``metadata`` too. What is written is what the
reference validator (``skills-ref``, which parses with strictyaml) reads: block style
only, strings quoted where YAML would read them as something else.

Beyond the spec, what Anthropic's validators refuse is refused too: XML tags in ``name``
or ``description``, and the words "anthropic" and "claude" in a name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from expgit.errors import InvalidInputError
from expgit.store.format import yamldump
from expgit.store.format.front_matter import replace_fields
from expgit.store.format.yamlload import BoundedSafeLoader

SKILL_FILE = "SKILL.md"
SPEC_KEYS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
KEPT_ASIDE = ("license", "compatibility", "allowed-tools")  # spec keys expgit does not use
NAME_MAX = 64
DESCRIPTION_MAX = 1024
COMPATIBILITY_MAX = 500
RESERVED_WORDS = ("anthropic", "claude")
ADVISED_LINES = 500  # the spec's advice for SKILL.md: under 500 lines, 5,000 tokens
ADVISED_TOKENS = 5000
STATUS, TAGS, ALWAYS = "expgit-status", "expgit-tags", "expgit-always"
_OWN = (STATUS, TAGS, ALWAYS)
_XML_TAG = re.compile(r"</?[A-Za-z_][^<>]*>")
_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def is_skill_path(path: str) -> bool:
    return path == SKILL_FILE or path.endswith("/" + SKILL_FILE)


def _strict_yaml(raw: str, path: str) -> None:
    """Refuse what strictyaml (the reference validator's parser) refuses: flow style,
    anchors and aliases, explicit tags."""
    try:
        events = list(yaml.parse(raw, Loader=BoundedSafeLoader))
    except yaml.YAMLError:
        return  # the caller's own parse reports it
    for event in events:
        what = None
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            what = "anchors and aliases (& and *)"
        elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)) \
                and event.flow_style:
            what = "flow style ({...} or [...]); write one item a line"
        elif isinstance(event, yaml.ScalarEvent) and event.tag is not None:
            what = "explicit tags (!!...)"
        if what is not None:
            mark = event.start_mark
            line = f" (line {mark.line + 2})" if mark is not None else ""
            raise InvalidInputError(
                f"{path}: front matter uses {what}{line}, which the Agent Skills "
                "validator's parser (strictyaml) refuses")


def _text(data: Mapping[str, Any], key: str, path: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{path}: {key} must be a string; quote it")
    return value


def check_skill_name(name: str, path: str) -> None:
    if not 1 <= len(name) <= NAME_MAX:
        raise InvalidInputError(f"{path}: name is {len(name)} characters long; the Agent "
                                f"Skills spec allows 1 to {NAME_MAX}")
    if _XML_TAG.search(name):
        raise InvalidInputError(f"{path}: name contains an XML tag")
    if not _NAME.fullmatch(name):
        raise InvalidInputError(
            f"{path}: name {name!r} is not lowercase letters, digits and single hyphens")
    for word in RESERVED_WORDS:
        if word in name:
            raise InvalidInputError(f"{path}: name {name!r} contains the reserved word "
                                    f"{word!r}, which Anthropic's skill validators refuse")


def description_problem(text: str) -> str | None:
    """Why ``text`` is no SKILL.md description the spec and Anthropic's validators take
    ("description is ..."), or None."""
    if not text.strip():
        return "description is empty; say what the skill does and when to use it"
    if len(text) > DESCRIPTION_MAX:
        return (f"description is {len(text)} characters long; the Agent Skills spec "
                f"allows at most {DESCRIPTION_MAX}")
    if _XML_TAG.search(text):
        return "description contains an XML tag"
    return None


def _check_description(text: str, path: str) -> None:
    found = description_problem(text)
    if found is not None:
        raise InvalidInputError(f"{path}: {found}")


def to_fields(data: Mapping[str, Any], raw: str, path: str
              ) -> tuple[dict[str, Any], dict[str, str]]:
    """``(expgit's front matter fields, the spec keys kept aside)`` of a SKILL.md front
    matter (``data`` parsed from ``raw``); raises InvalidInputError naming ``path``."""
    unknown = [str(k) for k in data if k not in SPEC_KEYS]
    if unknown:
        raise InvalidInputError(
            f"{path}: front matter keys outside the Agent Skills spec: "
            + ", ".join(sorted(unknown)),
            hint="allowed: " + ", ".join(SPEC_KEYS) + "; expgit's own fields go in "
                 f"metadata ({', '.join(_OWN)})")
    _strict_yaml(raw, path)
    name = _text(data, "name", path)
    if name is None:
        raise InvalidInputError(f"{path}: front matter has no name")
    check_skill_name(name, path)
    description = _text(data, "description", path)
    _check_description(description or "", path)
    aside = {k: v for k in KEPT_ASIDE if (v := _text(data, k, path)) is not None}
    if len(aside.get("compatibility", "")) > COMPATIBILITY_MAX:
        raise InvalidInputError(f"{path}: compatibility is longer than {COMPATIBILITY_MAX} "
                                "characters")
    metadata = data.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise InvalidInputError(f"{path}: metadata must map strings to strings; quote "
                                "each value (\"true\", \"1\")")
    always = metadata.get(ALWAYS, "false")
    if always not in ("true", "false"):
        raise InvalidInputError(f'{path}: metadata.{ALWAYS} must be "true" or "false"')
    fields = {"name": name, "summary": description,
              "status": metadata.get(STATUS, "active"),
              "tags": [t.strip() for t in metadata.get(TAGS, "").split(",") if t.strip()],
              "always": always == "true",
              "metadata": {k: v for k, v in metadata.items() if k not in _OWN}}
    return fields, aside


def _own_metadata(fields: Mapping[str, Any]) -> dict[str, str]:
    tags = [str(t) for t in fields.get("tags") or []]
    if any("," in t for t in tags):
        raise InvalidInputError(f"a tag may not contain a comma ({TAGS} is comma-separated)")
    return {STATUS: str(fields.get("status", "active")), TAGS: ", ".join(tags),
            ALWAYS: "true" if fields.get("always") else "false"}


def dump(fields: Mapping[str, Any], aside: Mapping[str, str]) -> str:
    """A whole SKILL.md front matter (without the ``---`` lines) for expgit's fields."""
    own = _own_metadata(fields)
    if not fields.get("tags"):
        del own[TAGS]
    if not fields.get("always"):
        del own[ALWAYS]
    data: dict[str, Any] = {"name": fields["name"], "description": fields.get("summary", "")}
    data |= {k: aside[k] for k in KEPT_ASIDE if k in aside}
    data["metadata"] = own | {str(k): str(v) for k, v in (fields.get("metadata") or {}).items()}
    return yamldump.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)


def _replace_nested(raw: str, key: str, fields: Mapping[str, str]) -> str | None:
    """``raw`` with keys of its block mapping ``key`` rewritten or added, the other lines
    kept; None when ``key`` is not a block mapping of its own lines."""
    try:
        root = yaml.compose(raw, Loader=BoundedSafeLoader)
    except yaml.YAMLError:
        return None
    if not isinstance(root, yaml.MappingNode):
        return None
    for k, value in root.value:
        if not (isinstance(k, yaml.ScalarNode) and k.value == key):
            continue
        if not isinstance(value, yaml.MappingNode) or value.flow_style \
                or value.start_mark.line == k.start_mark.line:
            return None
        lines = raw.splitlines(keepends=True)
        start = value.start_mark.line
        end = value.end_mark.line + (1 if value.end_mark.column > 0 else 0)
        indent = " " * value.start_mark.column
        block = lines[start:end]
        if not indent or not all(ln.startswith(indent) or not ln.strip() for ln in block):
            return None
        inner = replace_fields("".join(ln[len(indent):] if ln.strip() else ln
                                       for ln in block), fields)
        if inner is None:
            return None
        new = [indent + ln if ln.strip() else ln for ln in inner.splitlines(keepends=True)]
        return "".join(lines[:start] + new + lines[end:])
    return None


def replace_spec(raw: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """The SKILL.md front matter ``raw`` (whose expgit fields are ``old``) with the fields
    that differ in ``new`` rewritten, every other line kept; None when that cannot be
    done (the caller then writes the front matter anew, and checks what it gets)."""
    top: dict[str, Any] = {}
    if new["name"] != old["name"]:
        top["name"] = new["name"]
    if new["summary"] != old["summary"]:
        top["description"] = new["summary"]
    old_own, new_own = _own_metadata(old), _own_metadata(new)
    nested = {k: v for k, v in new_own.items() if v != old_own[k]}
    old_meta, new_meta = dict(old["metadata"]), dict(new["metadata"])
    if any(k not in new_meta for k in old_meta):  # a key removed: the whole block anew
        return replace_fields(raw, top | {"metadata": _ordered_metadata(raw, new_own,
                                                                        new_meta)})
    nested |= {str(k): str(v) for k, v in new_meta.items() if old_meta.get(k) != v}
    text = replace_fields(raw, top) if top else raw
    if text is None or not nested:
        return text
    replaced = _replace_nested(text, "metadata", nested)
    if replaced is not None:
        return replaced
    return replace_fields(text, {"metadata": _ordered_metadata(text, new_own, new_meta)})


def _ordered_metadata(raw: str, own: Mapping[str, str], other: Mapping[str, Any]
                      ) -> dict[str, str]:
    """The whole new metadata map, in the order the old one had its keys."""
    try:
        found = yaml.load(raw, Loader=BoundedSafeLoader)
    except yaml.YAMLError:
        found = None
    before = found.get("metadata") if isinstance(found, dict) else None
    defaults = {TAGS: "", ALWAYS: "false"}  # left out of a new map
    wanted = {k: v for k, v in own.items()
              if v != defaults.get(k) or (isinstance(before, dict) and k in before)}
    wanted |= {str(k): str(v) for k, v in other.items()}
    order = list(before) if isinstance(before, dict) else []
    return ({k: wanted[k] for k in order if k in wanted}
            | {k: v for k, v in wanted.items() if k not in order})


def size_warnings(text: str, path: str, tokens: int) -> list[str]:
    """The spec's advice on SKILL.md size (``tokens`` estimated), as warnings."""
    found = []
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    if lines > ADVISED_LINES:
        found.append(f"{path}: {lines} lines; the Agent Skills spec advises under "
                     f"{ADVISED_LINES} (move detail into references/)")
    if tokens > ADVISED_TOKENS:
        found.append(f"{path}: about {tokens} tokens; the Agent Skills spec advises under "
                     f"{ADVISED_TOKENS}")
    return found
