"""The public Python API, ``expgit.api``: every name it lists resolves and is documented,
importing it loads nothing behind it, and README.md and docs/*.md import from nothing else.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import expgit.api as api

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# ``from expgit.x import ...`` or ``import expgit.x``, anywhere on a page (fences or prose)
IMPORT_RE = re.compile(r"^\s*(?:from\s+(expgit[\w.]*)\s+import\b|import\s+(expgit[\w.]*))",
                       re.MULTILINE)
PYTHON_FENCE_RE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
HEAVY = frozenset({"fastapi", "starlette", "uvicorn", "openai", "httpx", "llama_cpp",
                   "numpy", "rich", "mcp", "git", "pydantic"})


def foreign_imports(text: str) -> list[str]:
    """The modules other than ``expgit.api`` that ``text`` imports from expgit."""
    return [a or b for a, b in IMPORT_RE.findall(text) if (a or b) != "expgit.api"]


def api_names_imported(text: str) -> list[str]:
    """The names the python fences of ``text`` import from ``expgit.api``."""
    names: list[str] = []
    for fence in PYTHON_FENCE_RE.findall(text):
        for node in ast.walk(ast.parse(fence)):
            if isinstance(node, ast.ImportFrom) and node.module == "expgit.api":
                names += [alias.name for alias in node.names]
    return names


@pytest.mark.parametrize("name", api.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(api, name) is not None


def test_every_public_name_has_one_home_and_one_line_of_docs() -> None:
    assert len(set(api.__all__)) == len(api.__all__)
    assert set(api.__all__) == set(api._HOME_OF)
    doc = api.__doc__ or ""
    undocumented = [n for n in api.__all__ if not re.search(rf"^  {n} -- \S", doc, re.M)]
    assert undocumented == []


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        api.no_such_name  # noqa: B018


def test_importing_the_api_loads_nothing_behind_it() -> None:
    code = ("import json, sys, expgit.api\n"
            "print(json.dumps(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT, timeout=120)
    loaded = set(json.loads(proc.stdout))
    assert {m for m in loaded if m.startswith("expgit")} == {"expgit", "expgit.api"}
    assert HEAVY & {m.partition(".")[0] for m in loaded} == set()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_import_only_the_public_api(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert foreign_imports(text) == []
    assert [n for n in api_names_imported(text) if n not in api.__all__] == []


def test_the_docs_check_finds_a_deep_import() -> None:
    page = ("Text.\n\n```python\nfrom expgit.api import Case, NoSuchName\n"
            "from expgit.retrieval.context import context_for\nimport expgit.store\n```\n")
    assert foreign_imports(page) == ["expgit.retrieval.context", "expgit.store"]
    assert api_names_imported(page) == ["Case", "NoSuchName"]


def test_the_docs_use_the_public_api() -> None:
    """The check above reads real snippets: the docs import from ``expgit.api``."""
    assert "context_for" in api_names_imported((ROOT / "docs" / "context.md").read_text("utf-8"))
