"""The example CI files (examples/github/expgit-train.yml and expgit-gate.yml,
examples/gitlab/.gitlab-ci.yml, their shell logic examples/ci/expgit-ci.sh) run as
written, offline.

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
from cli_support import agent, cases_file, hand_made_proposal
from conftest import EXAMPLE, ROOT, git
from forge_stub import URLS, comments, install_stubs, records
from scripted_pipeline import (
    BAGGAGE_CASE,
    GOLD_RULE,
    PETS_CASE,
    lesson_bodies,
    merge_of,
    reflect_for,
)

from expgit.init import init_repository
from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository

GITHUB = ROOT / "examples" / "github" / "expgit-train.yml"
GITHUB_GATE = ROOT / "examples" / "github" / "expgit-gate.yml"
GITLAB = ROOT / "examples" / "gitlab" / ".gitlab-ci.yml"
CI_SCRIPT = ROOT / "examples" / "ci" / "expgit-ci.sh"
# what a user sets EXPGIT_INSTALL to: expgit pinned at a commit
PINNED = "expgit @ git+https://github.com/OWNER/expgit@" + "0123456789abcdef" * 2 + "01234567"

# GitHub `uses:` steps: the test does their work itself, or there is none offline.
GITHUB_ACTIONS = {
    "actions/checkout@v4": "the test clones the bare repository (fetch-depth 0: all of it)",
    "actions/setup-python@v5": "python is this interpreter",
    "actions/upload-artifact@v4": "nowhere to upload; the test reads run.json itself",
}
# Shell lines that install software or name the real forge's URL.
NOT_RUN = {
    "python -m pip install $EXPGIT_INSTALL": "expgit is this interpreter's, first on PATH",
    "apt-get update -qq && apt-get install -y -qq git glab python3-venv":
        "git is there; glab is the stub",
    "python3 -m venv /opt/expgit && . /opt/expgit/bin/activate":
        "python is this interpreter",
    'git remote set-url origin "https://oauth2:${GITLAB_TOKEN}@${CI_SERVER_HOST}/'
    '${CI_PROJECT_PATH}.git"': "origin stays the local bare repository",
}
# GitHub expressions in `env:`: what the repository's settings would give.
EXPRESSIONS = {"vars.OPENAI_BASE_URL": "<the scripted server>", "vars.EXPGIT_INSTALL": PINNED,
               "secrets.OPENAI_API_KEY": "sk-test", "secrets.GITHUB_TOKEN": "gh-test",
               "github.repository": "example/experiences",
               "github.event.pull_request.number": "7", "github.base_ref": "main"}


def training_steps(repo: ExperienceRepository) -> list[Step]:
    """A baseline eval of PETS_CASE, one batch of BAGGAGE_CASE and PETS_CASE (2 rollouts,
    reflections, 1 merge) and the candidate eval of its proposal, of PETS_CASE; the final
    eval of the unchanged main is the baseline's (no rollout)."""
    bodies = lesson_bodies(repo)
    reflect = reflect_for(bodies)
    return [Step("rollout", agent), Step("rollout", agent), Step("rollout", agent),
            Step("rollout", agent), Step("reflect", reflect),
            Step("reflect", reflect), Step("merge", merge_of(bodies))]


@pytest.fixture
def forge(tmp_path: Path) -> Path:
    """The bare repository CI clones: example_repo's experiences, the cases files and
    ci/expgit-ci.sh."""
    bare = tmp_path / "forge.git"
    init_repository(bare, bare=True, seed=EXAMPLE, layout="flat")
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(bare), str(seed))
    (seed / "cases").mkdir()
    cases_file(seed / "cases" / "train.yaml", BAGGAGE_CASE, PETS_CASE)
    cases_file(seed / "cases" / "eval.yaml", PETS_CASE)
    (seed / "ci").mkdir()
    (seed / "ci" / "expgit-ci.sh").write_text(CI_SCRIPT.read_text())
    git(seed, "add", "cases", "ci")
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


@pytest.mark.slow
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
    assert ran == ["Check the secrets and variables", "Commit as the workflow",
                   "Train in propose mode", "Push each proposal and open its pull request"]
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


@pytest.mark.slow
def test_gitlab_job_trains_pushes_and_opens_the_merge_request(
        tmp_path: Path, forge: Path, serve: Any) -> None:
    job = yaml.safe_load(GITLAB.read_text())["expgit-train"]
    lines = [line for line in job["before_script"] + job["script"] if line not in NOT_RUN]
    assert len(lines) == len(job["before_script"]) + len(job["script"]) - 4
    server = serve(training_steps(ExperienceRepository.open(forge)))
    env = ci_env(tmp_path, {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "sk-test",
                            "GITLAB_TOKEN": "glpat-test", "CI_SERVER_HOST": "gitlab.example.com",
                            "EXPGIT_INSTALL": PINNED})
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


# ---------------------------------------------------------------- the gate on a pull request
GOLD = GOLD_RULE.strip("- \n")


def harmful(messages: list[dict[str, str]]) -> str:
    """The agent, which the proposal's gold rule confuses."""
    return "Sorry, I do not know." if GOLD in messages[0]["content"] else agent(messages)


def proposal_on_forge(run_cli: Any, forge: Path, tmp_path: Path) -> str:
    """A proposal adding the gold rule to checked-baggage-allowance, made in another
    clone and its branch pushed to the forge, as `expgit pr` does."""
    work = tmp_path / "maker"
    git(tmp_path, "clone", "-q", str(forge), str(work))
    pid = hand_made_proposal(run_cli, work, tmp_path)
    git(work, "push", "-q", "origin", f"expgit/proposals/{pid}")
    return pid


def head_checkout(forge: Path, tmp_path: Path, pid: str) -> Path:
    """The runner's checkout: the pull request's head, detached."""
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(forge), str(checkout))
    git(checkout, "checkout", "-q", "--detach", f"origin/expgit/proposals/{pid}")
    return checkout


def github_steps(job: dict[str, Any], checkout: Path, env: dict[str, str]
                 ) -> list[tuple[str, subprocess.CompletedProcess[str]]]:
    """The job's shell steps in order, as GitHub runs them: up to the first failing."""
    ran = []
    for step in job["steps"]:
        if "uses" in step:
            assert step["uses"] in GITHUB_ACTIONS, step
            continue
        if step["run"].strip() in NOT_RUN:
            continue
        ran.append((step["name"], bash(step["run"], checkout, env)))
        if ran[-1][1].returncode:
            break
    return ran


def one_comment(record: Path, thread: str) -> dict[str, Any]:
    threads = comments(record)
    assert list(threads) == [thread] and len(threads[thread]) == 1, threads
    comment: dict[str, Any] = threads[thread][0]
    assert comment["body"].startswith("<!-- expgit-gate -->\n## expgit gate: ")
    return comment


def test_every_install_is_pinned_and_the_gate_runs_on_proposal_branches_only() -> None:
    for path in (GITHUB, GITHUB_GATE, GITLAB):
        text = path.read_text()
        installs = [line.strip(" -") for line in text.splitlines() if "pip install" in line
                    and not line.lstrip().startswith("#")]
        assert installs and set(installs) <= {"run: python -m pip install $EXPGIT_INSTALL",
                                              "python -m pip install $EXPGIT_INSTALL"}, path
        assert not [line for line in text.splitlines() if "pull_request_target" in line
                    and not line.lstrip().startswith("#")]
    workflow = yaml.safe_load(GITHUB_GATE.read_text())
    # "on:" is YAML 1.1's true; opened, and every push to the branch (synchronize)
    assert workflow[True] == {"pull_request": {"types": ["opened", "synchronize", "reopened"]}}
    assert workflow["permissions"] == {"contents": "read", "pull-requests": "write"}
    [job] = workflow["jobs"].values()
    assert job["if"] == "startsWith(github.head_ref, 'expgit/proposals/')"
    [rule] = yaml.safe_load(GITLAB.read_text())["expgit-gate"]["rules"]
    assert rule["if"] == ('$CI_PIPELINE_SOURCE == "merge_request_event" && '
                          "$CI_MERGE_REQUEST_SOURCE_BRANCH_NAME =~ /^expgit\\/proposals\\//")


@pytest.mark.parametrize(("spec", "pinned"), [
    (PINNED, True),
    ("git+https://gitlab.example.com/OWNER/expgit.git@" + "a" * 40, True),
    ("--index-url https://pypi.example.com/simple expgit==0.1.0", True),
    ("expgit", False),
    ("expgit==0.1.0", False),  # a version of whatever the public index serves
    ("expgit @ git+https://github.com/OWNER/expgit@main", False),  # a branch moves
    ("git+https://github.com/OWNER/expgit", False),
    ("--index-url https://pypi.example.com/simple expgit", False),
])
def test_expgit_install_must_be_pinned(tmp_path: Path, spec: str, pinned: bool) -> None:
    env = {**os.environ, "EXPGIT_INSTALL": spec}
    proc = bash(f"bash {CI_SCRIPT} require EXPGIT_INSTALL", tmp_path, env)
    assert proc.returncode == (0 if pinned else 1), proc.stderr
    if not pinned:
        assert proc.stderr.startswith("expgit-ci: EXPGIT_INSTALL is not pinned: ")
        assert len(proc.stderr.splitlines()) == 1


@pytest.mark.slow
def test_github_gate_posts_one_comment_updates_it_and_fails_the_check(
        tmp_path: Path, forge: Path, serve: Any, run_cli: Any) -> None:
    """Opened: both sides pass, the gate passes, one comment. A push later: the head
    now loses its case, the same comment says FAILED and the check fails (exit 6)."""
    [job] = yaml.safe_load(GITHUB_GATE.read_text())["jobs"].values()
    pid = proposal_on_forge(run_cli, forge, tmp_path)
    checkout = head_checkout(forge, tmp_path, pid)
    held_out = cases_file(tmp_path / "held-out.yaml", BAGGAGE_CASE)
    env = ci_env(tmp_path, {**github_env(job, "http://unused"),
                            "EXPGIT_EVAL_CASES": str(held_out)})
    record, thread = Path(env["FORGE_STUB_RECORD"]), "repos/example/experiences/issues/7/comments"

    server = serve([Step("rollout", agent)] * 2)  # base and head
    ran = github_steps(job, checkout, {**env, "OPENAI_BASE_URL": server.url})
    assert [name for name, _ in ran] == ["Check the secrets and variables",
                                         "Re-measure the head against its base, comment, gate"]
    assert all(proc.returncode == 0 for _, proc in ran), ran[-1][1].stderr
    server.chat.assert_done()
    first = one_comment(record, thread)
    assert first["body"].startswith("<!-- expgit-gate -->\n## expgit gate: passed\n")
    assert "| baseline | 1/1 | 100.00% |" in first["body"]
    assert "| candidate | 1/1 | 100.00% |" in first["body"]
    assert "expgit-ci: posted the gate comment" in ran[-1][1].stderr
    report = json.loads((checkout / "gate.json").read_text())
    [candidate] = report["candidates"]
    assert candidate["proposal"] == pid and candidate["gate"]["passed"] is True

    server = serve([Step("rollout", harmful)] * 2)
    ran = github_steps(job, checkout, {**env, "OPENAI_BASE_URL": server.url})
    assert ran[-1][1].returncode == 6, ran[-1][1].stderr  # EXIT_GATE: the check fails
    server.chat.assert_done()
    second = one_comment(record, thread)
    assert second["id"] == first["id"]
    assert second["body"].startswith("<!-- expgit-gate -->\n## expgit gate: FAILED\n")
    assert "`checked-baggage-allowance`" not in second["body"]
    assert f"`{BAGGAGE_CASE.name}`: pass -> fail" in second["body"]
    assert "expgit-ci: updated the gate comment" in ran[-1][1].stderr


@pytest.mark.slow
def test_github_gate_without_a_secret_fails_its_first_step_naming_it(
        tmp_path: Path, forge: Path, serve: Any) -> None:
    """A fork's pull request gets no secrets: the first step says which is missing."""
    [job] = yaml.safe_load(GITHUB_GATE.read_text())["jobs"].values()
    server = serve([])
    env = ci_env(tmp_path, github_env(job, server.url))
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(forge), str(checkout))
    for name in ("OPENAI_API_KEY", "EXPGIT_INSTALL"):
        ran = github_steps(job, checkout, {**env, name: ""})
        [(step, proc)] = ran
        assert step == "Check the secrets and variables" and proc.returncode == 1
        assert proc.stderr == (f"expgit-ci: {name} is not set: add it to the CI settings (a "
                               "secret or a variable; a fork's pull request gets none)\n")
    assert server.requests == 0 and records(Path(env["FORGE_STUB_RECORD"])) == []


@pytest.mark.slow
def test_gitlab_gate_posts_one_note_updates_it_and_fails_the_pipeline(
        tmp_path: Path, forge: Path, serve: Any, run_cli: Any) -> None:
    job = yaml.safe_load(GITLAB.read_text())["expgit-gate"]
    lines = [line for line in job["before_script"] + job["script"] if line not in NOT_RUN]
    assert len(lines) == len(job["before_script"]) + len(job["script"]) - 3
    pid = proposal_on_forge(run_cli, forge, tmp_path)
    checkout = head_checkout(forge, tmp_path, pid)
    held_out = cases_file(tmp_path / "held-out.yaml", BAGGAGE_CASE)
    env = ci_env(tmp_path, {"OPENAI_API_KEY": "sk-test", "GITLAB_TOKEN": "glpat-test",
                            "EXPGIT_INSTALL": PINNED, "CI_PROJECT_ID": "42",
                            "CI_MERGE_REQUEST_IID": "7",
                            "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
                            "EXPGIT_EVAL_CASES": str(held_out)})
    record, thread = Path(env["FORGE_STUB_RECORD"]), "projects/42/merge_requests/7/notes"
    server = serve([Step("rollout", agent)] * 2)
    proc = bash("\n".join(lines), checkout, {**env, "OPENAI_BASE_URL": server.url})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    server.chat.assert_done()
    first = one_comment(record, thread)
    assert first["body"].startswith("<!-- expgit-gate -->\n## expgit gate: passed\n")

    server = serve([Step("rollout", harmful)] * 2)
    proc = bash("\n".join(lines), checkout, {**env, "OPENAI_BASE_URL": server.url})
    assert proc.returncode == 6, proc.stdout + proc.stderr
    second = one_comment(record, thread)
    assert second["id"] == first["id"] and "## expgit gate: FAILED" in second["body"]
    [put] = [r for r in records(record) if "PUT" in r["argv"]]
    assert put["cli"] == "glab" and f"{thread}/{first['id']}" in put["argv"]

    missing = bash("\n".join(lines), checkout, {**env, "GITLAB_TOKEN": ""})
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [
        "expgit-ci: GITLAB_TOKEN is not set: add it to the CI settings (a secret or a "
        "variable; a fork's pull request gets none)"]
