"""A cases file's environment: checked at load time and recorded on each case.

``{environment: NAME, database: FILE, cases: [...]}`` (``database`` relative to the
cases file) binds every case to a tool environment: each case's
``metadata.environment`` becomes ``{"name": NAME, "database": <absolute path>}``, which
the executor of :mod:`expgit.runs.wiring` routes on. Refused here, before anything runs
(InvalidInputError): an unknown environment, a fixture that does not parse, a case
without a user (:func:`~expgit.train.tools.users.check_user_input`), a ``tool_called``
/ ``tool_not_called`` check of a tool the environment lacks, a ``db_state`` path whose
record (every part but the last) is not in the fixture; and, in a file without an
environment, any ``db_state`` or tool check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from expgit.core.checks import MISSING, DbStateCheck, ToolCalledCheck, ToolNotCalledCheck, walk
from expgit.core.domain import Case
from expgit.errors import InvalidInputError
from expgit.train.tools.environment import EnvironmentFactory
from expgit.train.tools.registry import open_environment
from expgit.train.tools.users import check_user_input

KEY = "environment"


def binding(case: Case) -> tuple[str, Path] | None:
    """(environment name, database path) the case is bound to, or None."""
    bound = case.metadata.get(KEY)
    if not isinstance(bound, dict):
        return None
    name, database = bound.get("name"), bound.get("database")
    if isinstance(name, str) and isinstance(database, str):
        return name, Path(database)
    return None


def _check_case(case: Case, factory: EnvironmentFactory | None, where: str) -> None:
    state = factory.initial_state() if factory is not None else None
    for criterion in case.rubric.criteria:
        check = criterion.check
        label = f"{where} ({case.name!r}): criterion {criterion.name!r}"
        if not isinstance(check, DbStateCheck | ToolCalledCheck | ToolNotCalledCheck):
            continue
        if factory is None or state is None:
            raise InvalidInputError(f"{label}: a {check.type} check needs a tool "
                                    "environment", hint="name one at the top of the cases "
                                    "file: {environment: airline, database: FILE, cases: [...]}")
        if isinstance(check, DbStateCheck):
            for path in check.expected:
                parent = path.rpartition(".")[0]
                if not parent or walk(state, parent) is MISSING:
                    raise InvalidInputError(f"{label}: db_state path {path!r} refers to a "
                                            "record that is not in the database fixture")
        elif check.name not in factory.tool_names:
            raise InvalidInputError(f"{label}: unknown tool {check.name!r}; the environment "
                                    f"has {', '.join(sorted(factory.tool_names))}")


def bind_cases(cases: list[Case], header: dict[str, Any], path: Path) -> list[Case]:
    """The cases of ``path`` bound to the environment its ``header`` names (if any)."""
    name, database = header.get("environment"), header.get("database")
    if name is None:
        if database is not None:
            raise InvalidInputError(f"{path}: 'database' needs an 'environment'")
        for i, case in enumerate(cases):
            _check_case(case, None, f"{path}: case {i}")
        return cases
    if not isinstance(name, str) or not isinstance(database, str):
        raise InvalidInputError(f"{path}: 'environment' and 'database' must both be given, "
                                "as text (database: a JSON file, relative to the cases file)")
    fixture = (path.parent / database).resolve()
    factory = open_environment(name, fixture)
    bound = []
    for i, case in enumerate(cases):
        where = f"{path}: case {i}"
        check_user_input(case, f"{where} ({case.name!r})")
        _check_case(case, factory, where)
        bound.append(case.model_copy(update={"metadata": {
            **case.metadata, KEY: {"name": name, "database": str(fixture)}}}))
    return bound
