"""Where the packaged hook programs and templates live.

In a built wheel they are ``expgit/_data/{hooks,templates}`` (see pyproject's
force-include); in a source checkout they are the top-level ``hooks/`` and ``templates/``.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"expgit installation is missing its {name}/ folder")
