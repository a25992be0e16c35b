"""Changing some fields of a YAML front matter and keeping the bytes of the others.

:func:`replace_fields` rewrites only the lines of the fields it is given: each is written
as :func:`expgit.store.format.yamldump.safe_dump` writes it, except that a list written as a
flow list (``tags: [a, b]``) stays one; a field the front matter lacks is added at its
end. Every other line (other fields, comments, blank lines, quoting, list style) keeps its
exact bytes, so the diff of an edit shows only what the edit changed. It works on a
block mapping whose keys start their lines; for anything else it returns None and the
caller writes the whole front matter anew.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from expgit.store.format import yamldump
from expgit.store.format.yamlload import BoundedSafeLoader


def _spans(raw: str, lines: list[str]) -> dict[str, tuple[int, int, yaml.Node]] | None:
    """Each top-level field's lines ``[start, end)`` and value node, or None when the
    front matter is not a block mapping of plain keys at column 0."""
    try:
        root = yaml.compose(raw, Loader=BoundedSafeLoader)
    except yaml.YAMLError:
        return None
    if not isinstance(root, yaml.MappingNode) or root.flow_style:
        return None
    spans: dict[str, tuple[int, int, yaml.Node]] = {}
    pairs = root.value
    for i, (key, value) in enumerate(pairs):
        if not isinstance(key, yaml.ScalarNode) or key.start_mark.column != 0 \
                or key.value in spans:
            return None
        start = key.start_mark.line
        end = value.end_mark.line + (1 if value.end_mark.column > 0 else 0)
        if i + 1 < len(pairs):
            end = min(end, pairs[i + 1][0].start_mark.line)
        end = max(end, start + 1)
        while end - 1 > start and lines[end - 1].strip()[:1] in ("", "#"):
            end -= 1  # comments and blank lines after the value are not the field's
        spans[key.value] = (start, end, value)
    return spans


def _field_text(key: str, value: Any, node: yaml.Node | None) -> str:
    if isinstance(node, yaml.SequenceNode) and node.flow_style and isinstance(value, list):
        flow = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True,
                              width=1000).strip()
        if "\n" not in flow:
            return f"{key}: {flow}\n"
    return yamldump.safe_dump({key: value}, sort_keys=False, allow_unicode=True, width=1000)


def replace_fields(raw: str, fields: Mapping[str, Any]) -> str | None:
    """``raw`` (front matter text, each line ending in a newline) with ``fields``
    rewritten or added, every other byte kept; None when it cannot (see the module
    docstring). The caller checks that the result reads back as intended."""
    if not raw.endswith("\n"):
        return None
    lines = raw.splitlines(keepends=True)
    spans = _spans(raw, lines)
    if spans is None:
        return None
    replaced: dict[int, tuple[int, str]] = {}
    added = []
    for key, value in fields.items():
        if key in spans:
            start, end, node = spans[key]
            replaced[start] = (end, _field_text(key, value, node))
        else:
            added.append(_field_text(key, value, None))
    out: list[str] = []
    i = 0
    while i < len(lines):
        if i in replaced:
            end, text = replaced[i]
            out.append(text)
            i = end
        else:
            out.append(lines[i])
            i += 1
    return "".join(out + added)
