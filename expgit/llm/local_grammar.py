"""The embedded server's JSON-Schema-to-grammar conversion, made safe for bounded schemas.

With ``response_format={"type": "json_object", "schema": ...}`` llama-cpp-python turns
the schema into a GBNF grammar in Python (``llama_cpp.llama_grammar``), and the model can
only write what the grammar allows: a ``maxLength`` or ``maxItems`` makes a small model
stop. Two flaws of that converter are fixed here, in the server process only:

* bounded repetitions (``maxLength``, ``{m,n}`` in a ``pattern``) are spelled as nested
  optionals ``(c (c (c)?)?)?``; llama.cpp's parser counts the rules of the nest against
  its limit (2000) and refuses anything about 1000 deep, after which llama-cpp-python
  samples with a NULL grammar and the server dies (SIGSEGV). :func:`patch_converter`
  spells them ``c{m,n}`` as llama.cpp's own converter does, which the parser expands
  itself, and caps the count below the limit (validation still checks the real bound);
* a string character may be a raw control character (a literal newline), which is not
  valid JSON; the patched ``char`` rule excludes them, as llama.cpp's own rule does.

A schema the converter cannot handle (e.g. a ``(?:...)`` group in a pattern) silently
falls back to plain JSON, with no bounds at all: the tests call the converter's
``json_schema_to_gbnf``, which raises instead, to prove every output schema converts.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

# llama.cpp's MAX_REPETITION_THRESHOLD: a repetition count (times the rules it repeats)
# must stay below it.
REPETITION_LIMIT = 2000
MAX_REPEAT = REPETITION_LIMIT - 1
# llama.cpp's own string character: no quote, no backslash, no control character.
JSON_CHAR = (r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] '
             r'[0-9a-fA-F] [0-9a-fA-F])')
_PATCHED = "_expgit_patched"

Builder = Callable[..., str]


def flat_repetition(original: Builder) -> Builder:
    """``_build_repetition`` that writes ``item{m,n}`` (count capped at MAX_REPEAT) for a
    bounded repetition without separator; everything else goes to ``original``."""

    def build(item_rule: str, min_items: int, max_items: int | None,
              separator_rule: str | None = None, item_rule_is_literal: bool = False
              ) -> str:
        if separator_rule or max_items is None or max_items - min_items <= 1:
            return original(item_rule, min_items, max_items, separator_rule,
                            item_rule_is_literal)
        high = min(max_items, MAX_REPEAT)
        low = min(min_items, high)
        return f"{item_rule}{{{low},{high}}}"

    return build


def patch_converter(module: ModuleType) -> None:
    """Patch ``llama_cpp.llama_grammar`` (``module``) in place; idempotent."""
    if getattr(module, _PATCHED, False):
        return
    module._build_repetition = flat_repetition(module._build_repetition)  # type: ignore[attr-defined]
    rules: dict[str, Any] = module.PRIMITIVE_RULES
    rules["char"] = module.BuiltinRule(JSON_CHAR, [])
    setattr(module, _PATCHED, True)

