"""The environments a cases file can name (``environment: airline``), by name.

Built in: ``airline`` (:mod:`expgit.train.tools.airline`) and ``tau2-airline``
(:mod:`expgit.train.tau2.environment`, tau2-bench's own domain; its cases come from
``--cases tau2:airline:SPLIT``). A program registers its own
kind with :func:`register` before loading cases that name it; a cases file run by the
CLI names it by import path instead, ``module:attribute`` (an EnvironmentKind object,
or a class of one), imported when the file is loaded.
"""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import Any

from expgit.errors import InvalidInputError
from expgit.train.tools.environment import EnvironmentFactory, EnvironmentKind

_KINDS: dict[str, EnvironmentKind] = {}
_LOCK = threading.Lock()
_OPENED: dict[tuple[str, str], EnvironmentFactory] = {}


def register(kind: EnvironmentKind) -> None:
    """Make ``kind`` loadable by its name (a later kind of the same name replaces it)."""
    with _LOCK:
        _KINDS[kind.name] = kind
        for key in [k for k in _OPENED if k[0] == kind.name]:
            del _OPENED[key]


def names() -> list[str]:
    _builtin()
    with _LOCK:
        return sorted(_KINDS)


def environment_kind(name: str) -> EnvironmentKind:
    """The kind registered as ``name``; InvalidInputError naming the known ones."""
    _builtin()
    with _LOCK:
        kind = _KINDS.get(name)
    if kind is None and ":" in name:
        kind = _imported(name)
    if kind is None:
        raise InvalidInputError(f"unknown environment {name!r}; known: "
                                f"{', '.join(names()) or '(none)'}",
                                hint="register it with expgit.train.tools.registry.register")
    return kind


def _imported(path: str) -> EnvironmentKind:
    module_name, _, attribute = path.partition(":")
    try:
        found: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise InvalidInputError(f"environment {path!r} cannot be imported: {exc}") from None
    kind = found() if isinstance(found, type) else found
    if not callable(getattr(kind, "open", None)):
        raise InvalidInputError(f"environment {path!r} has no open(database) method")
    with _LOCK:
        _KINDS[path] = kind
    return kind  # type: ignore[no-any-return]


def open_environment(name: str, database: Path) -> EnvironmentFactory:
    """The factory of ``database`` for kind ``name``, parsed once per process."""
    key = (name, str(database))
    with _LOCK:
        factory = _OPENED.get(key)
    if factory is None:
        factory = environment_kind(name).open(database)
        with _LOCK:
            _OPENED[key] = factory
    return factory


def _builtin() -> None:
    with _LOCK:
        if "airline" in _KINDS:
            return
    from expgit.train.tau2.environment import TAU2_AIRLINE  # imports its package on use
    from expgit.train.tools.airline import AIRLINE  # its tools load only when needed

    with _LOCK:
        _KINDS.setdefault("airline", AIRLINE)
        _KINDS.setdefault(TAU2_AIRLINE.name, TAU2_AIRLINE)
