"""``yaml.safe_dump`` through libyaml where that gives the very same text.

libyaml's emitter (``yaml.CSafeDumper``) is about ten times faster than PyYAML's pure
Python one but does not write every document alike: it folds long scalars at other
points, writes empty and long mapping keys as simple keys, escapes characters beyond
U+FFFF and quotes the line breaks NEL, LS and PS differently. :func:`safe_dump` uses it
only for data where the two agree: JSON-like values (dict with string keys, list, str,
int, float, bool, None), keys of 1 to 100 characters, strings of at most 200 printable
characters of the basic multilingual plane (``\\n`` and ``\\t`` allowed), and a
``width`` of 1000 or more, so that nothing is folded. Any other data goes through
PyYAML's Python emitter, as ``yaml.safe_dump`` would.
"""

from __future__ import annotations

from typing import Any

import yaml

_CDumper: type[yaml.SafeDumper] | None = getattr(yaml, "CSafeDumper", None)
_KEY_CHARS = 100
_STRING_CHARS = 200
_MIN_WIDTH = 1000
_SCALARS = (bool, int, float, type(None))


def _plain_string(text: str, limit: int) -> bool:
    if len(text) > limit or (text and max(text) > "\uffff"):
        return False
    return text.isprintable() or text.replace("\n", "").replace("\t", "").isprintable()


def libyaml_safe(data: Any, depth: int = 0) -> bool:
    """Whether libyaml writes ``data`` exactly as PyYAML's Python emitter does (see the
    module docstring); False for anything it cannot tell."""
    if depth > 20:
        return False
    kind = type(data)
    if kind is str:
        return _plain_string(data, _STRING_CHARS)
    if kind in _SCALARS:
        return True
    if kind is list:
        return all(libyaml_safe(item, depth + 1) for item in data)
    if kind is dict:
        return all(type(key) is str and len(key) > 0 and _plain_string(key, _KEY_CHARS)
                   and libyaml_safe(value, depth + 1) for key, value in data.items())
    return False


def safe_dump(data: Any, *, sort_keys: bool = False, allow_unicode: bool = True,
              width: int = _MIN_WIDTH) -> str:
    """``yaml.safe_dump(data, sort_keys=..., allow_unicode=..., width=...)``, the same
    text, through libyaml when :func:`libyaml_safe` says it may."""
    if _CDumper is not None and width >= _MIN_WIDTH and libyaml_safe(data):
        return yaml.dump(data, Dumper=_CDumper, sort_keys=sort_keys,
                         allow_unicode=allow_unicode, width=width)
    return yaml.safe_dump(data, sort_keys=sort_keys, allow_unicode=allow_unicode,
                          width=width)
