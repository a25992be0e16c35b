"""scripts/run_example.sh, the README's main job, where the embedded model is not
installed: one line says what to install (the README's command), the script exits 2,
and nothing but the freshly initialised repository is left. (The script's run on a
scripted model is tests/test_readme.py's.)"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, git

from expgit.errors import EXIT_USAGE
from expgit.llm.local import INSTALL_COMMAND, MODEL_PACKAGE

# Hides the embedded model's packages from every Python the script starts: the import
# system finds neither (as after a plain `pip install -e .`), whatever this venv holds.
HIDE = f"""
import sys

class HideEmbeddedModel:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ({MODEL_PACKAGE!r}, "llama_cpp"):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, HideEmbeddedModel())
"""


def script_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """``expgit`` and ``python3`` are this interpreter; no model is configured."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, module in (("expgit", "-m expgit"), ("python3", "")):
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {module} "$@"\n')
        wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "EXPGIT_")) and k != "PYTHONPATH"}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "NO_COLOR": "1",
            "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), **extra}


def run_script(work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / "scripts" / "run_example.sh"), str(work)],
                          env=env, capture_output=True, text=True, timeout=600)


def test_main_job_without_the_embedded_model_says_what_to_install(tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(HIDE)
    work = tmp_path / "work"
    proc = run_script(work, script_env(
        tmp_path, PYTHONPATH=os.pathsep.join([str(shim), str(ROOT)])))
    assert proc.returncode == EXIT_USAGE, (proc.stdout, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("expgit: error: "), proc.stderr
    assert MODEL_PACKAGE in errors[0] and INSTALL_COMMAND in errors[0]
    assert "Traceback" not in proc.stderr
    # the script stopped at the first model call: the repository is as init left it
    repo = work / "experiences"
    refs = git(repo, "for-each-ref", "--format=%(refname)").split()
    assert refs == ["refs/heads/main"]
    assert git(repo, "rev-list", "--count", "main").strip() == "1"


def test_the_install_hint_is_the_readme_command() -> None:
    readme = (ROOT / "README.md").read_text()
    assert f"```sh\n{INSTALL_COMMAND}\n```" in readme
