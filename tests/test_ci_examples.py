"""The example CI files (examples/github/expgit-train.yml, examples/gitlab/.gitlab-ci.yml)
run as written, offline.

Each file is parsed, and its shell steps run in order, as the CI would run them, in a
fresh clone of a local bare repository (the "forge") whose main holds the cases files:
GitHub's ``run:`` steps each with ``bash --noprofile --norc -eo pipefail`` (``shell:
bash``), GitLab's ``before_script`` and ``script`` lines in one ``bash -eo pipefail``.
The model is the scripted OpenAI-compatible server on 127.0.0.1, ``gh`` and ``glab`` are
the recording stubs of tests/forge_stub.py, and ``expgit`` and ``python`` are this
interpreter. What cannot run offline is listed below, each with why; a step that is
neither run nor listed fails the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import agent, cases_file
from conftest import EXAMPLE, ROOT, git
from forge_stub import URLS, install_stubs, records
from scripted_pipeline import (
    BAGGAGE_CASE,
    PETS_CASE,
    lesson_bodies,
    merge_of,
    reflect_for,
)

from expgit.init import init_repository
from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository

GITHUB = ROOT / "examples" / "github" / "expgit-train.yml"
GITLAB = ROOT / "examples" / "gitlab" / ".gitlab-ci.yml"

# GitHub `uses:` steps: the test does their work itself, or there is none offline.
GITHUB_ACTIONS = {
    "actions/checkout@v4": "the test clones the bare repository (fetch-depth 0: all of it)",
    "actions/setup-python@v5": "python is this interpreter",
    "actions/upload-artifact@v4": "nowhere to upload; the test reads run.json itself",
}
# Shell lines that install software or name the real forge's URL.
NOT_RUN = {
    "python -m pip install expgit": "expgit is this interpreter's, first on PATH",
    "apt-get update -qq && apt-get install -y -qq git glab python3-venv":
        "git is there; glab is the stub",
    "python3 -m venv /opt/expgit && . /opt/expgit/bin/activate":
        "python is this interpreter",
    'git remote set-url origin "https://oauth2:${GITLAB_TOKEN}@${CI_SERVER_HOST}/'
    '${CI_PROJECT_PATH}.git"': "origin stays the local bare repository",
}
# GitHub expressions in `env:`: what the repository's settings would give.
EXPRESSIONS = {"vars.OPENAI_BASE_URL": "<the scripted server>",
               "secrets.OPENAI_API_KEY": "sk-test", "secrets.GITHUB_TOKEN": "gh-test"}


def training_steps(repo: ExperienceRepository) -> list[Step]:
    """A baseline eval of PETS_CASE, one batch of BAGGAGE_CASE and PETS_CASE (2 rollouts,
    reflections, 1 merge), the candidate eval of its proposal and a final eval, both of
    PETS_CASE."""
    bodies = lesson_bodies(repo)
    reflect = reflect_for(bodies)
    return [Step("rollout", agent), Step("rollout", agent), Step("rollout", agent),
            Step("rollout", agent), Step("rollout", agent), Step("reflect", reflect),
            Step("reflect", reflect), Step("merge", merge_of(bodies))]


@pytest.fixture
def forge(tmp_path: Path) -> Path:
    """The bare repository CI clones: example_repo's experiences and the cases files."""
    bare = tmp_path / "forge.git"
    init_repository(bare, bare=True, seed=EXAMPLE)
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(bare), str(seed))
    (seed / "cases").mkdir()
    cases_file(seed / "cases" / "train.yaml", BAGGAGE_CASE, PETS_CASE)
    cases_file(seed / "cases" / "eval.yaml", PETS_CASE)
    git(seed, "add", "cases")
    git(seed, "commit", "-q", "-m", "cases for CI")
    git(seed, "push", "-q", "origin", "main")
    return bare


def ci_env(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    """A runner's environment: the stubs and this interpreter first on PATH, a fresh
    HOME and no git identity (the workflow sets its own)."""
    bin_dir = tmp_path / "ci-bin"
    record = install_stubs(bin_dir)
    for name, argv in (("expgit", f'"{sys.executable}" -m expgit'),
                       ("python", f'"{sys.executable}"')):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {argv} "$@"\n')
        (bin_dir / name).chmod(0o755)
    home = tmp_path / "ci-home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("GIT_", "OPENAI_", "EXPGIT_"))}
    env.update({"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(home),
                "GIT_CONFIG_NOSYSTEM": "1", "FORGE_STUB_RECORD": str(record), **extra})
    return env


def bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def github_env(job: dict[str, Any], server_url: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for key, value in job["env"].items():
        match = re.fullmatch(r"\$\{\{ *([\w.]+) *\}\}", str(value))
        assert match and match.group(1) in EXPRESSIONS, f"env {key}: {value}"
        env[key] = server_url if key == "OPENAI_BASE_URL" else EXPRESSIONS[match.group(1)]
    return env


def check_proposal_pushed(forge: Path, checkout: Path, call: dict[str, Any]
                          ) -> tuple[str, str]:
    """The run's one proposal is on the forge at its commit, and the forge CLI got its
    branch and its body with the trailers; main did not move. (id, its author)."""
    [pid] = json.loads((checkout / "run.json").read_text())["proposals"]
    branch = f"expgit/proposals/{pid}"
    assert git(forge, "rev-parse", branch) == git(checkout, "rev-parse", branch)
    assert git(forge, "rev-parse", "main") == git(checkout, "rev-parse", "origin/main")
    assert branch in call["argv"] and "main" in call["argv"]
    body = call["body_file"] if call["cli"] == "gh" else call["argv"][
        call["argv"].index("--description") + 1]
    assert f"\n\nExpgit-Proposal: {pid}\nExpgit-Gradient: " in body
    author = git(forge, "log", "-1", "--format=%an <%ae>", branch).strip()
    return pid, author


def test_github_workflow_trains_pushes_and_opens_the_pull_request(
        tmp_path: Path, forge: Path, serve: Any) -> None:
    workflow = yaml.safe_load(GITHUB.read_text())
    assert workflow["defaults"]["run"]["shell"] == "bash"
    assert workflow["permissions"] == {"contents": "write", "pull-requests": "write"}
    [job] = workflow["jobs"].values()
    server = serve(training_steps(ExperienceRepository.open(forge)))
    env = ci_env(tmp_path, github_env(job, server.url))
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(forge), str(checkout))  # actions/checkout
    ran = []
    for step in job["steps"]:
        if "uses" in step:
            assert step["uses"] in GITHUB_ACTIONS, step
            continue
        script = step["run"].strip()
        if script in NOT_RUN:
            continue
        proc = bash(script, checkout, env)
        assert proc.returncode == 0, f"{step.get('name')}: {proc.stdout}{proc.stderr}"
        ran.append(step["name"])
    assert ran == ["Commit as the workflow", "Train in propose mode",
                   "Push each proposal and open its pull request"]
    server.chat.assert_done()
    [call] = records(Path(env["FORGE_STUB_RECORD"]))
    assert call["cli"] == "gh" and call["argv"][:2] == ["pr", "create"]
    pid, author = check_proposal_pushed(forge, checkout, call)
    assert author == "github-actions[bot] <41898282+github-actions[bot]@users.noreply.github.com>"
    # an error exit fails the step, and so the job: here the forge refuses the PR
    last = job["steps"][-2]["run"]
    failed = bash(last, checkout, {**env, "FORGE_STUB_FAIL": "1"})
    assert failed.returncode == 1
    assert failed.stderr.startswith("expgit: error: gh pr create failed: GraphQL: the forge "
                                    "refused the pull request (the branch is pushed;")
    assert len(records(Path(env["FORGE_STUB_RECORD"]))) == 2 and pid


def test_gitlab_job_trains_pushes_and_opens_the_merge_request(
        tmp_path: Path, forge: Path, serve: Any) -> None:
    job = yaml.safe_load(GITLAB.read_text())["expgit-train"]
    lines = [line for line in job["before_script"] + job["script"] if line not in NOT_RUN]
    assert len(lines) == len(job["before_script"]) + len(job["script"]) - 4
    server = serve(training_steps(ExperienceRepository.open(forge)))
    env = ci_env(tmp_path, {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "sk-test",
                            "GITLAB_TOKEN": "glpat-test", "CI_SERVER_HOST": "gitlab.example.com"})
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(forge), str(checkout))
    git(checkout, "checkout", "-q", "--detach")  # as the runner leaves it
    proc = bash("\n".join(lines), checkout, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    server.chat.assert_done()
    [call] = records(Path(env["FORGE_STUB_RECORD"]))
    assert call["cli"] == "glab" and call["argv"][:2] == ["mr", "create"]
    assert call["argv"][-1] == "--yes"
    _, author = check_proposal_pushed(forge, checkout, call)
    assert author == "expgit CI <expgit-ci@gitlab.example.com>"
    assert URLS["glab"] in proc.stdout
