"""Cases files: YAML or JSONL, loaded whole into ``list[Case]`` or refused whole.

Formats, by file extension:

* ``.yaml`` / ``.yml`` (YAML, duplicate keys refused) or ``.json``: a list of cases, or a
  mapping ``{cases: [...]}``, optionally with ``environment`` and ``database``: the tool
  environment the cases run in (see :mod:`expgit.train.tools.binding`);
* ``.jsonl``: one case object per line (blank lines are skipped);
* not a file: ``tau2:DOMAIN:SPLIT[#IDS]``, tau2-bench's tasks (:mod:`expgit.train.tau2.cases`).

A case is :class:`expgit.core.domain.Case`; each criterion's ``check`` is one of the
checks of :mod:`expgit.core.checks` (``{type: contains, value: ...}`` etc.). Conveniences,
applied before validation:

* ``task_signature`` may be omitted: it defaults to the case ``name``;
* ``input`` may be a plain string: it becomes ``{user_query: <string>}``;
* ``rubric.name`` may be omitted: it defaults to the case ``name``.

Also refused: duplicate case names, a rubric without criteria (such a case would pass
vacuously), duplicate criterion names within a rubric, an empty file. Every problem is an
:class:`InvalidInputError` naming the file, the case (index, or line for JSONL, and name
when known) and the field; nothing is returned partially.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from expgit.core.domain import Case
from expgit.core.jsonl import loads_untrusted
from expgit.errors import InvalidInputError, NotFoundError, UsageError
from expgit.store.format.files import read_regular_file
from expgit.store.format.yamlload import UniqueKeyLoader
from expgit.train.context import PipelineContext
from expgit.train.tau2.cases import is_tau2_source, load_tau2_cases
from expgit.train.tools.binding import bind_cases

_YAML_SUFFIXES = (".yaml", ".yml", ".json")
_JSONL_SUFFIXES = (".jsonl",)
_MAX_PROBLEMS = 6

def _summarise(exc: ValidationError) -> str:
    errors = exc.errors()
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'case'}: "
             f"{e['msg'].removeprefix('Value error, ')}" for e in errors[:_MAX_PROBLEMS]]
    if len(errors) > _MAX_PROBLEMS:
        parts.append(f"... ({len(errors) - _MAX_PROBLEMS} more)")
    return "; ".join(parts)


def _normalise(raw: dict[str, Any]) -> dict[str, Any]:
    data = dict(raw)
    name = data.get("name")
    if isinstance(name, str):
        data.setdefault("task_signature", name)
        rubric = data.get("rubric")
        if isinstance(rubric, dict) and "name" not in rubric:
            data["rubric"] = {"name": name, **rubric}
    if isinstance(data.get("input"), str):
        data["input"] = {"user_query": data["input"]}
    return data


def parse_case(raw: Any, where: str) -> Case:
    """One case from decoded YAML/JSON; ``where`` labels errors ("cases.yaml: case 2")."""
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{where}: a case must be a mapping of fields, "
                                f"not {type(raw).__name__}")
    label = f"{where} ({raw['name']!r})" if isinstance(raw.get("name"), str) else where
    try:
        case = Case.model_validate(_normalise(raw))
    except ValidationError as exc:
        raise InvalidInputError(f"{label}: {_summarise(exc)}") from None
    if not case.name.strip():
        raise InvalidInputError(f"{label}: name: must not be empty")
    if not case.rubric.criteria:
        raise InvalidInputError(f"{label}: rubric.criteria: at least one criterion is needed")
    names = [c.name for c in case.rubric.criteria]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidInputError(f"{label}: rubric.criteria: duplicate criterion names "
                                f"{', '.join(map(repr, dupes))}")
    return case


def _read(path: Path) -> str:
    try:
        data = read_regular_file(path)  # a named pipe would block: refused
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such cases file") from None
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read the cases file: {exc.strerror}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _decode_document(path: Path, text: str) -> Any:
    if path.suffix.lower() == ".json":
        try:
            return loads_untrusted(text)
        except ValueError as exc:
            raise InvalidInputError(f"{path}: not valid JSON: {exc}") from None
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InvalidInputError(f"{path}: not valid YAML{line}: {problem}") from None


_HEADER_KEYS = {"cases", "environment", "database"}


def _document_items(path: Path, text: str, header: dict[str, Any]
                    ) -> list[tuple[Any, str]]:
    doc = _decode_document(path, text)
    if isinstance(doc, dict):
        if "cases" not in doc or not set(doc) <= _HEADER_KEYS:
            extra = sorted(map(str, set(doc) - _HEADER_KEYS))
            raise InvalidInputError(
                f"{path}: the top level must be a list of cases or a mapping with "
                f"'cases' (and 'environment', 'database')"
                + (f" (unexpected: {', '.join(extra)})" if extra else ""))
        header.update({k: v for k, v in doc.items() if k != "cases"})
        doc = doc["cases"]
    if not isinstance(doc, list):
        raise InvalidInputError(f"{path}: the top level must be a list of cases or "
                                "{cases: [...]}")
    return [(raw, f"{path}: case {i}") for i, raw in enumerate(doc)]


def _jsonl_items(path: Path, text: str) -> list[tuple[Any, str]]:
    items: list[tuple[Any, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append((loads_untrusted(line), f"{path}: line {number}"))
        except ValueError as exc:
            raise InvalidInputError(f"{path}: line {number}: not valid JSON: {exc}") from None
    return items


def load_cases(path: str | Path) -> list[Case]:
    """Every case of a YAML/JSON/JSONL cases file, or of a case source named by its
    scheme (``tau2:airline:test``: :mod:`expgit.train.tau2.cases`); raises
    InvalidInputError (whole file)."""
    if is_tau2_source(str(path)):
        return load_tau2_cases(str(path))
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in _YAML_SUFFIXES + _JSONL_SUFFIXES:
        raise InvalidInputError(f"{path}: unknown cases file type {suffix or '(none)'!r}; "
                                "use .yaml, .yml, .json or .jsonl")
    text = _read(path)
    header: dict[str, Any] = {}
    items = (_jsonl_items(path, text) if suffix in _JSONL_SUFFIXES
             else _document_items(path, text, header))
    if not items:
        raise InvalidInputError(f"{path}: contains no cases")
    cases: list[Case] = []
    first_seen: dict[str, str] = {}
    for raw, where in items:
        case = parse_case(raw, where)
        if case.name in first_seen:
            raise InvalidInputError(f"{where}: duplicate case name {case.name!r} (first at "
                                    f"{first_seen[case.name].removeprefix(f'{path}: ')})")
        first_seen[case.name] = where
        cases.append(case)
    return bind_cases(cases, header, path)


class ListCaseLoader:
    """Yields a fixed list of cases in order, in batches of at most ``batch_size``.

    Every call of :meth:`batches` yields each case exactly once; no batch is empty (no
    cases: no batch). ``batch_size`` < 1 is a UsageError at construction.
    """

    def __init__(self, cases: Sequence[Case], batch_size: int) -> None:
        if batch_size < 1:
            raise UsageError(f"batch size must be at least 1, not {batch_size}")
        self.cases = list(cases)
        self.batch_size = batch_size

    async def batches(self, context: PipelineContext) -> AsyncIterator[list[Case]]:
        for start in range(0, len(self.cases), self.batch_size):
            yield self.cases[start:start + self.batch_size]
