"""The built wheel: it ships the hook stubs and templates, and an installed expgit uses them.

The wheel is built from a copy of the sources (so the checkout stays untouched), installed
without dependencies into a virtual environment that sees this python's packages
(``--system-site-packages``), and exercised only through that environment's executables,
with no path back to the checkout.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

# builds a wheel and a virtual environment
pytestmark = pytest.mark.slow

SOURCES = ("pyproject.toml", "README.md", "expgit", "hooks", "templates")


def run(*args: str | Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _see_this_pythons_packages(venv: Path, env: dict[str, str]) -> None:
    """``--system-site-packages`` shows the base interpreter's packages; when the tests
    themselves run in a virtual environment the dependencies live there, so list its
    site-packages too (after the venv's own: the installed wheel still comes first)."""
    dirs = [d for d in (*site.getsitepackages(), site.getusersitepackages())
            if Path(d).is_dir()]
    purelib = run(venv / "bin" / "python", "-c",
                  "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                  cwd=venv, env=env).stdout.strip()
    (Path(purelib) / "_expgit_test_deps.pth").write_text("\n".join(dirs) + "\n")


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with the freshly built wheel installed in it."""
    if importlib.util.find_spec("build") is None:
        pytest.skip("the `build` package is not installed (pip install -e '.[dev]')")
    base = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, src / name)
    # without network, build with the installed backend; otherwise build isolated as usual
    isolation = ["--no-isolation"] if importlib.util.find_spec("hatchling") else []
    run(sys.executable, "-m", "build", "--wheel", *isolation, "--outdir", base / "dist", src,
        cwd=base, env=env)
    (wheel,) = (base / "dist").glob("expgit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("expgit/_data/hooks/pre-commit", "expgit/_data/hooks/pre-receive",
                    "expgit/_data/hooks/update", "expgit/_data/templates/proposal.md.j2",
                    "expgit/hooks/run.py"):
        assert shipped in names, f"{shipped} is missing from {wheel.name}"

    venv = base / "venv"
    run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv,
        cwd=base, env=env)
    _see_this_pythons_packages(venv, env)
    # pip comes from this python's packages; it installs into the venv because the
    # venv's python runs it
    run(venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index",
        "--disable-pip-version-check", "-q", wheel, cwd=base, env=env)
    return venv


@pytest.fixture
def venv_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_the_venv_imports_the_installed_wheel(venv: Path, venv_env: dict[str, str],
                                              tmp_path: Path) -> None:
    proc = run(venv / "bin" / "python", "-c",
               "import expgit, expgit.resources as r; print(expgit.__file__); "
               "print(r.data_dir('hooks'))", cwd=tmp_path, env=venv_env)
    module, hooks = proc.stdout.splitlines()
    assert Path(module).is_relative_to(venv)
    assert hooks.endswith(os.path.join("expgit", "_data", "hooks"))


def test_hooks_install_from_the_venv(venv: Path, venv_env: dict[str, str],
                                     tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    run("git", "init", "-q", "-b", "main", repo, cwd=tmp_path, env=venv_env)
    (repo / "expgit.toml").write_text('experiences_root = "experiences"\n')
    run("git", "add", "-A", cwd=repo, env=venv_env)
    run("git", "commit", "-q", "-m", "settings", cwd=repo, env=venv_env)
    proc = run(venv / "bin" / "expgit", "-C", repo, "hooks", "install", cwd=tmp_path,
               env=venv_env)
    assert "installed the pre-commit hook" in proc.stdout
    stub = (repo / ".git" / "hooks" / "pre-commit").read_text()
    assert f"INSTALL_PYTHON='{venv / 'bin' / 'python'}'" in stub

    (repo / "experiences").mkdir()
    (repo / "experiences" / "first-rule.md").write_text(
        "---\nname: first-rule\n---\nDo the right thing.\n")
    run("git", "add", "-A", cwd=repo, env=venv_env)
    run("git", "commit", "-q", "-m", "first", cwd=repo, env=venv_env)

    (repo / "experiences" / "bad.md").write_text("---\nname: not-bad\n---\nbody\n")
    run("git", "add", "-A", cwd=repo, env=venv_env)
    refused = subprocess.run(["git", "commit", "-q", "-m", "bad"], cwd=repo, env=venv_env,
                             capture_output=True, text=True)
    assert refused.returncode != 0
    assert "expgit: commit refused:" in refused.stderr


def test_render_a_packaged_template_from_the_venv(venv: Path, venv_env: dict[str, str],
                                                  tmp_path: Path) -> None:
    code = ("from expgit.store.format import templates; print(templates.render('proposal.md.j2', "
            "base='0'*40, main_branch='main', gradients=[], merger='mechanical', items=[], "
            "provenance=None, predictions={}))")
    proc = run(venv / "bin" / "python", "-c", code, cwd=tmp_path, env=venv_env)
    assert proc.stdout.startswith(
        "Base: `000000000000` on `main`. Merged 0 gradients with the mechanical merger.\n")
    assert "## Changes" in proc.stdout
