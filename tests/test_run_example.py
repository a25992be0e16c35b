"""scripts/run_example.sh, the README's main job: every section works on the state the
repository is in (training made a proposal the gate passed, or none at all), and where
the embedded model is not installed, one line says what to install (the README's
command), the script exits 2, and nothing but the freshly initialised repository is
left. (The script's run where the gate refuses the proposal is tests/test_docs.py's, on README.md.)
The model is a local OpenAI-compatible server answering from a strict script."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, git
from scripted_pipeline import layout_reflect, layout_reply

from expgit.errors import EXIT_USAGE
from expgit.llm.local import INSTALL_COMMAND, MODEL_PACKAGE
from expgit.llm.scripted import Step

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


LESSON_TITLE = "Answer from the written rules"
LESSON = {"name": "answer-from-the-rules", "action": "create",
          "rationale": "The agent answered cancellation and baggage questions without "
                       "reading the rules that decide them.",
          "summary": "Quote the rule that decides a cancellation or a bag fee.",
          "tags": ["policy"], "confidence": 0.6,
          "body": f"# {LESSON_TITLE}\n\nWhen a user asks about cancelling or about bags, "
                  "find the rule that decides it and quote it before you answer.\n"}
RIGHT = ("You can cancel it: a booking made within the last 24 hours is eligible. With one "
         "free bag, the two other bags cost $100 in total.")


def agent(messages: list[dict[str, str]]) -> str:
    """Wrong on main; right wherever the trained lesson is in the prompt."""
    return RIGHT if LESSON_TITLE in messages[0]["content"] else "Sorry, I do not know."


def run_scripted(work: Path, server: Any) -> subprocess.CompletedProcess[str]:
    """The script on the scripted endpoint ``server``: it succeeds, and makes exactly
    the scripted calls."""
    proc = run_script(work, script_env(work.parent, OPENAI_BASE_URL=server.url,
                                       OPENAI_API_KEY="scripted"))
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert server.unexpected == []
    server.chat.assert_done()
    return proc


def hand_made_update_reverted(work: Path, out: str) -> None:
    """Section 4 ran to its end: its proposal applied to main, then reverted."""
    repo = work / "experiences"
    assert "Done. The experience repository is" in out
    subjects = git(repo, "log", "--format=%s", "-2", "main").splitlines()
    assert subjects[0].startswith("Revert") and "3 experiences" in subjects[1], subjects
    assert git(repo, "diff", "main~2", "main", "--", "skills").strip() == ""


@pytest.mark.slow("minutes")  # the main job
def test_a_proposal_the_gate_passes_is_applied_and_the_rest_goes_on(
        tmp_path: Path, serve: Any) -> None:
    # baseline, training, candidate: 2 each (the final eval is the baseline's); then
    # section 4's eval --compare: 2 x 2
    rollouts = [Step("rollout", agent)] * 10
    server = serve([*rollouts, Step("reflect", layout_reflect(LESSON)),
                    Step("reflect", layout_reflect(LESSON)),
                    Step("merge", layout_reply({"items": [
                        {**LESSON, "action": "upsert", "gradient_ids": []}]}))])
    work = tmp_path / "work"
    proc = run_scripted(work, server)
    assert "learned: proposal " in proc.stdout and "(+100.00pp, 95% interval" in proc.stdout
    assert "(the gate passed it)" in proc.stdout
    repo = work / "experiences"
    applied = git(repo, "log", "--format=%s", "main").splitlines()
    assert "expgit: update 1 experience: answer-from-the-rules" in applied
    hand_made_update_reverted(work, proc.stdout)
    # the revert undid the hand-made update only: the trained lesson stays on main
    assert "answer-from-the-rules/" in git(repo, "show", "main:skills/").split()


@pytest.mark.slow("minutes")  # the main job
def test_without_a_proposal_the_review_section_says_so_and_the_rest_goes_on(
        tmp_path: Path, serve: Any) -> None:
    refused = {**LESSON, "name": "no-such-lesson", "action": "delete", "body": ""}
    # baseline, training: 2 each; section 4's eval --compare: 2 x 2
    server = serve([*[Step("rollout", agent)] * 8, Step("reflect", layout_reflect(refused)),
                    Step("reflect", layout_reflect(refused))])
    work = tmp_path / "work"
    proc = run_scripted(work, server)
    assert "learned: nothing. The run made no proposal" in proc.stdout
    assert "training made no proposal this time" in proc.stdout
    hand_made_update_reverted(work, proc.stdout)


@pytest.mark.slow
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
