"""The layers of ``expgit/``: every import points down, and no modules import in a circle;
inside a package split by concern, its sub-packages import each other in a declared order;
every package's ``__init__`` says what it holds and what it may import (docs/design.md,
"Layout").

Imports are read from the source with :mod:`ast`, all of them: top-level, inside
functions, and under ``if TYPE_CHECKING:`` (a type-only import still means one module
knows the other). The checks are tested on planted trees too, so they can fail.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT

# Lowest first. A module belongs to the unit with the longest matching prefix; a unit may
# import itself and any unit of a lower layer, never a unit of its own layer or above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("expgit.errors", "expgit.resources"),  # foundation: the error kinds, packaged data
    ("expgit.core",),  # the shared vocabulary: domain, checks, bounded JSON, redaction
    ("expgit.git",),  # git's formats and processes; the only user of GitPython
    ("expgit.store",),  # experience files, snapshots, gradients, proposals, apply, review
    ("expgit.hooks",),  # the installed hook stubs and the checks they run
    ("expgit.llm", "expgit.asgi"),  # the LLM port; HTTP serving plumbing
    ("expgit.retrieval",),  # what an agent reads: context, relevance, the skill listing
    ("expgit.train",),  # the training framework: components, pipeline, measurement
    ("expgit.outcomes",),  # outcome records and per-experience statistics
    ("expgit.remote",),  # the remote benchmark protocol, its clients and SDK
    ("expgit.runs",),  # one run wired from settings: the composition root
    ("expgit.sessions", "expgit.learn", "expgit.init"),  # features built on runs
    ("expgit.status",),  # the repository at a glance: store, doctor and sessions read
    ("expgit.service",),  # the HTTP services
    ("expgit.cli",),  # the command line: one thin module per command
    ("expgit.__main__", "expgit.api", "expgit"),  # entry points, the public API
)
GITPYTHON_HOME = "expgit.git"

# Inside a package split by concern, its sub-packages import each other in this order
# (lowest first; the same rules as LAYERS: down only, never sideways). The modules at a
# package's root are its hub (the pipeline, the repository, the session store): they may
# import any of its sub-packages, and its sub-packages may import them.
SUBLAYERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "expgit.core": (("expgit.core.redaction",),),
    "expgit.store": (
        ("expgit.store.format",),  # the files and what they say
        ("expgit.store.derived",),  # computed from history, kept to save recomputing
        ("expgit.store.workflow",),  # gradients, proposals, apply, review, revert
    ),
    "expgit.train": (
        ("expgit.train.guards",),  # the checks of a model's edit
        ("expgit.train.records",),  # trajectories and transcripts
        ("expgit.train.measurement",),  # candidate, metrics, evals, track record
        ("expgit.train.tools",),  # tool environments
        ("expgit.train.tau2",),  # tau2-bench's domain, an environment of tools
        ("expgit.train.tools.registry",),  # environments by name, tau2's among them
        ("expgit.train.tools.binding",),
        ("expgit.train.components",),  # the pipeline's components
        ("expgit.train.reports",),  # the run report, verdict and evidence
    ),
    "expgit.sessions": (
        ("expgit.sessions.formats",),  # session files' row formats
        ("expgit.sessions.status",),  # counts, the ledger and its checkpoint
        ("expgit.sessions.ingest",),  # discovery, parsing, segmentation
    ),
}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(root, p): p for p in sorted(root.rglob("*.py"))}


def imports(name: str, path: Path) -> Iterator[tuple[str, str, int]]:
    """``(imported name, what it names, line)`` for every import in the module: the
    dotted module, or for ``from M import x`` the candidate ``M.x``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                yield target, f"{target}.{alias.name}", node.lineno


def edges(root: Path) -> list[Edge]:
    """Imports between modules of the package at ``root``. An import of the bare root
    package is left out: Python runs it before any of its modules anyway."""
    known = modules(root)
    found: list[Edge] = []
    for name, path in known.items():
        for target, candidate, line in imports(name, path):
            resolved = candidate if candidate in known else target
            if resolved in known and resolved != name and resolved != root.name:
                found.append(Edge(name, resolved, line))
    return found


def unit_of(module: str, layers: Sequence[Sequence[str]]) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for rank, units in enumerate(layers):
        for unit in units:
            if (module == unit or module.startswith(unit + ".")) and (
                    best is None or len(unit) > len(best[1])):
                best = (rank, unit)
    return best


def layer_violations(root: Path, layers: Sequence[Sequence[str]]) -> list[str]:
    problems = [f"{m} is in no layer (add its package to LAYERS)"
                for m in modules(root) if unit_of(m, layers) is None]
    for edge in edges(root):
        source, target = unit_of(edge.source, layers), unit_of(edge.target, layers)
        if source is None or target is None or source[1] == target[1]:
            continue
        if target[0] >= source[0]:
            where = "up a layer" if target[0] > source[0] else "sideways in its layer"
            problems.append(f"{edge.source} (line {edge.line}) imports {edge.target}: "
                            f"{source[1]} -> {target[1]} points {where}")
    return problems


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def module_circles(root: Path) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for edge in edges(root):
        graph.setdefault(edge.source, set()).add(edge.target)
    return circles(graph)


def gitpython_users(root: Path) -> list[str]:
    return sorted({name for name, path in modules(root).items()
                   for target, _, _ in imports(name, path)
                   if target == "git" or target.startswith("git.")})


# ---------------------------------------------------------------------- the real tree


def test_every_import_points_down_a_layer() -> None:
    assert layer_violations(ROOT / "expgit", LAYERS) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert module_circles(ROOT / "expgit") == []


def test_only_the_git_package_imports_gitpython() -> None:
    users = gitpython_users(ROOT / "expgit")
    assert users, "no module imports GitPython: the check reads nothing"
    assert [u for u in users if unit_of(u, [[GITPYTHON_HOME]]) is None] == []


def test_the_checks_read_the_real_imports() -> None:
    found = {(e.source, e.target) for e in edges(ROOT / "expgit")}
    assert ("expgit.store.repository", "expgit.store.derived.snapshot") in found
    assert ("expgit.cli._common", "expgit.store.repository") in found
    # and imports between sub-packages, which SUBLAYERS orders
    assert ("expgit.store.workflow.proposals", "expgit.store.derived.applied") in found
    assert ("expgit.sessions.ingest.command", "expgit.sessions.formats.parse") in found
    assert ("expgit.train.components.policy_optimizer", "expgit.train.guards.lesson") in found
    assert len(found) > 300


# ------------------------------------------------------------------- planted trees


def plant(tmp_path: Path, files: Mapping[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return root


PLANTED_LAYERS = (("pkg.low",), ("pkg.high",), ("pkg",))


def test_a_planted_circle_is_found(tmp_path: Path) -> None:
    root = plant(tmp_path, {
        "low/__init__.py": "",
        "low/a.py": "from pkg.low import b\n",
        "low/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from pkg.low.c import C\n",
        "low/c.py": "def f():\n    from . import a\n",
        "low/d.py": "import pkg.low.a\n",
    })
    assert module_circles(root) == [["pkg.low.a", "pkg.low.b", "pkg.low.c"]]


def test_a_planted_import_up_a_layer_is_found(tmp_path: Path) -> None:
    root = plant(tmp_path, {
        "low/__init__.py": "",
        "low/base.py": "def f():\n    from pkg.high.top import g\n",
        "high/__init__.py": "",
        "high/top.py": "from pkg.low.base import f\n",
    })
    problems = layer_violations(root, PLANTED_LAYERS)
    assert problems == ["pkg.low.base (line 2) imports pkg.high.top: "
                        "pkg.low -> pkg.high points up a layer"]


def test_a_planted_sideways_import_and_an_unplaced_module_are_found(tmp_path: Path) -> None:
    root = plant(tmp_path, {
        "low/__init__.py": "", "low/x.py": "from pkg.side import y\n",
        "side.py": "y = 1\n",
    })
    problems = layer_violations(root, (("pkg.low", "pkg.side"), ("pkg.high",)))
    assert "pkg is in no layer (add its package to LAYERS)" in problems
    assert ("pkg.low.x (line 1) imports pkg.side: pkg.low -> pkg.side points sideways "
            "in its layer") in problems


@pytest.mark.parametrize("code", ["import git\n", "from git import Repo\n",
                                  "def f():\n    import git.objects\n"])
def test_a_planted_gitpython_import_outside_the_git_package_is_found(
        tmp_path: Path, code: str) -> None:
    root = plant(tmp_path, {"git/__init__.py": "import git\n", "store.py": code})
    assert gitpython_users(root) == ["pkg.git", "pkg.store"]


def sublayer_violations(root: Path, package: str,
                        layers: Sequence[Sequence[str]]) -> list[str]:
    """Imports between two sub-packages of ``package`` that do not point down ``layers``,
    and the sub-packages ``layers`` does not place."""
    folder = root.parent.joinpath(*package.split("."))
    problems = [f"{package}.{sub.name} is in no sub-layer (add it to SUBLAYERS)"
                for sub in sorted(folder.iterdir())
                if (sub / "__init__.py").is_file()
                and unit_of(f"{package}.{sub.name}", layers) is None]
    inside = package + "."
    for edge in edges(root):
        if not (edge.source.startswith(inside) and edge.target.startswith(inside)):
            continue
        source, target = unit_of(edge.source, layers), unit_of(edge.target, layers)
        if source is None or target is None or source[1] == target[1]:
            continue
        if target[0] >= source[0]:
            where = "up" if target[0] > source[0] else "sideways"
            problems.append(f"{edge.source} (line {edge.line}) imports {edge.target}: "
                            f"{source[1]} -> {target[1]} points {where} in {package}")
    return problems


def undocumented_packages(root: Path) -> list[str]:
    """Packages whose ``__init__`` docstring does not say what they hold and, in a
    paragraph of its own starting "May import:", what they may import."""
    found = []
    for init in sorted(root.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        paragraphs = [p for p in doc.split("\n\n") if p.strip()]
        if not (len(paragraphs) >= 2 and any(p.startswith("May import:") for p in paragraphs)
                and not paragraphs[0].startswith("May import:")):
            found.append(module_name(root, init))
    return found


@pytest.mark.parametrize("package", sorted(SUBLAYERS))
@pytest.mark.slow
def test_sub_packages_import_each_other_in_their_order(package: str) -> None:
    assert sublayer_violations(ROOT / "expgit", package, SUBLAYERS[package]) == []


def test_every_package_says_what_it_holds_and_may_import() -> None:
    assert undocumented_packages(ROOT / "expgit") == []


def test_a_planted_sub_package_import_up_and_an_unplaced_sub_package_are_found(
        tmp_path: Path) -> None:
    root = plant(tmp_path, {
        "low/__init__.py": "",
        "low/a/__init__.py": "", "low/a/x.py": "from pkg.low.b.y import f\n",
        "low/b/__init__.py": "", "low/b/y.py": "from pkg.low.hub import g\nf = 1\n",
        "low/c/__init__.py": "", "low/c/z.py": "from pkg.low.b import y\n",
        "low/hub.py": "from pkg.low.a.x import f\ng = 2\n",
        "low/d/__init__.py": "",
    })
    layers = (("pkg.low.a", "pkg.low.c"), ("pkg.low.b",))
    assert sublayer_violations(root, "pkg.low", layers) == [
        "pkg.low.d is in no sub-layer (add it to SUBLAYERS)",
        "pkg.low.a.x (line 1) imports pkg.low.b.y: pkg.low.a -> pkg.low.b points up in "
        "pkg.low",
        "pkg.low.c.z (line 1) imports pkg.low.b.y: pkg.low.c -> pkg.low.b points up in "
        "pkg.low",
    ]
    assert sublayer_violations(root, "pkg.low", (("pkg.low.b",), ("pkg.low.a",),
                                                 ("pkg.low.c",), ("pkg.low.d",))) == []
    sideways = sublayer_violations(root, "pkg.low", (("pkg.low.b", "pkg.low.c"),
                                                     ("pkg.low.a", "pkg.low.d")))
    assert sideways == ["pkg.low.c.z (line 1) imports pkg.low.b.y: pkg.low.c -> pkg.low.b "
                        "points sideways in pkg.low"]


def test_a_planted_package_without_its_holds_and_imports_is_found(tmp_path: Path) -> None:
    root = plant(tmp_path, {
        "a/__init__.py": '"""Holds a.\n\nMay import: nothing."""\n',
        "b/__init__.py": '"""Holds b, and may import anything."""\n',
        "c/__init__.py": "x = 1\n",
        "d/__init__.py": '"""May import: nothing.\n\nHolds d."""\n',
    })
    assert undocumented_packages(root) == ["pkg", "pkg.b", "pkg.c", "pkg.d"]
