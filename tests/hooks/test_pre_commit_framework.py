"""``.pre-commit-hooks.yaml`` through the real ``pre-commit`` framework, offline.

The framework does what it does for any user: it reads the manifest with its own schema,
clones the hook repository at a commit, creates a virtualenv for it, ``pip install``s the
repository into it, and runs the hook's ``entry`` from there. The hook repository is a
commit of this source tree (its package, hooks, templates, manifest).

Offline, and honestly so: pip gets no index (``PIP_NO_INDEX=1``, no pip config), and the
dependencies (GitPython, pydantic, ...) are found already installed because this
interpreter's site-packages are on ``PYTHONPATH``; the wheel is built without build
isolation by the hatchling installed there. expgit itself is installed into the
framework's environment from the commit, and the hook runs that copy.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import EXAMPLE, ROOT, git
from pre_commit.clientlib import load_manifest

from expgit.init import init_repository

# builds the framework's hook environment (a virtualenv, pip install of this tree)
pytestmark = pytest.mark.slow

HOOK_REPO_FILES = ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml", "expgit",
                   "hooks", "templates")
RULES = "refund-method-rules"
PRE_COMMIT = [sys.executable, "-m", "pre_commit"]


def test_the_manifest_passes_pre_commits_own_schema() -> None:
    [hook] = load_manifest(str(ROOT / ".pre-commit-hooks.yaml"))
    assert hook["id"] == "expgit-validate" and hook["entry"] == "expgit-validate"
    assert hook["language"] == "python"
    assert hook["pass_filenames"] is False and hook["always_run"] is True


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A git repository holding this tree's package and manifest: (path, commit)."""
    path = tmp_path_factory.mktemp("hook-repo")
    for name in HOOK_REPO_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, path / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, path / name)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(path)}
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-q",
                  "-m", "hook repository"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, env=env, check=True,
                         capture_output=True, text=True).stdout.strip()
    return path, sha


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One framework cache for the module: the hook environment is built once."""
    return tmp_path_factory.mktemp("pre-commit-home")


def offline_env(pre_commit_home: Path) -> dict[str, str]:
    paths = sysconfig.get_paths()
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env.update({
        "PRE_COMMIT_HOME": str(pre_commit_home),
        "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",  # pip's spelling of --no-build-isolation
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PYTHONPATH": os.pathsep.join(dict.fromkeys([paths["purelib"], paths["platlib"]])),
    })
    return env


def target(tmp_path: Path, hook_repo: tuple[Path, str]) -> Path:
    """An experience repository whose .pre-commit-config.yaml uses the hook repository."""
    path = tmp_path / "experiences"
    init_repository(path, seed=EXAMPLE, layout="flat")
    repo, sha = hook_repo
    (path / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {repo}\n    rev: {sha}\n    hooks:\n      - id: expgit-validate\n")
    git(path, "add", ".pre-commit-config.yaml")
    return path


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def break_name(path: Path) -> None:
    file = path / "experiences" / f"{RULES}.md"
    file.write_text(file.read_text().replace(f"name: {RULES}", "name: wrong-name", 1))
    git(path, "add", "experiences")


def test_pre_commit_run_refuses_an_invalid_staged_experience(
        tmp_path: Path, hook_repo: tuple[Path, str], pre_commit_home: Path) -> None:
    path, env = target(tmp_path, hook_repo), offline_env(pre_commit_home)
    passed = run([*PRE_COMMIT, "run"], path, env)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "expgit validate (staged experience files)" in passed.stdout
    assert passed.stdout.rstrip().endswith("Passed")
    # the hook ran from the framework's environment, where pip installed the hook repo
    [installed] = pre_commit_home.glob("repo*/py_env-*/bin/expgit-validate")
    assert list(installed.parent.parent.glob("lib/python*/site-packages/expgit/hooks/run.py"))
    break_name(path)
    failed = run([*PRE_COMMIT, "run"], path, env)
    assert failed.returncode == 1
    assert "- hook id: expgit-validate" in failed.stdout
    assert (f"experiences/{RULES}.md: front matter name 'wrong-name' differs from the file "
            f"name '{RULES}'") in failed.stdout


def test_pre_commit_install_over_expgits_own_hook_commits_and_refuses(
        tmp_path: Path, hook_repo: tuple[Path, str], pre_commit_home: Path) -> None:
    """``pre-commit install`` moves expgit's stub to pre-commit.legacy and runs it first:
    the stub must not then run itself again, forever."""
    path, env = target(tmp_path, hook_repo), offline_env(pre_commit_home)
    installed = run([*PRE_COMMIT, "install"], path, env)
    assert installed.returncode == 0, installed.stderr
    assert (path / ".git" / "hooks" / "pre-commit.legacy").is_file()
    committed = run(["git", "commit", "-q", "-m", "use pre-commit"], path, env)
    assert committed.returncode == 0, committed.stdout + committed.stderr
    break_name(path)
    refused = run(["git", "commit", "-q", "-m", "broken"], path, env)
    assert refused.returncode == 1
    output = refused.stdout + refused.stderr  # git shows a hook's output on stderr
    assert re.search(r"expgit validate \(staged experience files\)\.+Failed", output), output
    # once from expgit's own stub (now pre-commit.legacy), once from the framework's hook
    assert output.count("expgit: commit refused:") == 2, output
    assert "front matter name 'wrong-name'" in output
    assert git(path, "log", "-1", "--format=%s").strip() == "use pre-commit"
