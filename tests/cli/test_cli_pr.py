"""``expgit pr``: push a proposal's branch to a remote (a local bare repository standing
in for the forge) and open its pull request with a stub ``gh`` or ``glab`` on ``PATH``
that records its arguments (tests/forge_stub.py). No network."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import Driver, edited, git
from forge_stub import URLS, install_stubs, records, stub_env
from json_shapes import assert_shape

from expgit.store.format import trailers as tr
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.forge import forge_for, remote_host
from expgit.store.workflow.proposals import find_proposal
from expgit.store.workflow.pull_request import pr_text

BAGS = "checked-baggage-allowance"


@pytest.fixture
def forge(driver: Driver, tmp_path: Path) -> Path:
    """A bare repository as the remote ``origin`` of the driver's repository."""
    bare = tmp_path / "forge.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    driver.git("remote", "add", "origin", str(bare))
    driver.git("push", "-q", "origin", "main")
    return bare


@pytest.fixture
def stubs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """gh and glab stubs first on PATH; their record file."""
    record = install_stubs(tmp_path / "stubs")
    for key, value in stub_env(tmp_path / "stubs", record).items():
        monkeypatch.setenv(key, value)
    return record


def proposal(driver: Driver, seeded_repo: ExperienceRepository) -> tuple[str, str]:
    """An open proposal of one gradient: (proposal id, gradient commit)."""
    gid = driver.propose(BAGS, edited(BAGS, "\nA 4th bag costs 50 USD.\n", seeded_repo),
                         rationale="the 4th bag's price was misquoted")
    return driver.merge(gid), driver.rev(f"expgit/gradients/{gid}")


def remote_refs(bare: Path) -> str:
    return git(bare, "for-each-ref", "--format=%(refname) %(objectname)")


def test_pr_pushes_the_branch_and_opens_the_pull_request_with_gh(
        driver: Driver, seeded_repo: ExperienceRepository, forge: Path, stubs: Path) -> None:
    pid, gradient = proposal(driver, seeded_repo)
    commit = driver.rev(f"expgit/proposals/{pid}")
    result = driver.ok("pr", pid, "--remote", "origin", "--open")
    assert result.out.splitlines() == [
        f"expgit/proposals/{pid}: pushed to origin ({forge})", f"opened: {URLS['gh']}"]
    assert git(forge, "rev-parse", f"refs/heads/expgit/proposals/{pid}").strip() == commit
    [call] = records(stubs)
    subject = driver.git("log", "-1", "--format=%s", commit).strip()
    assert call["cli"] == "gh" and Path(call["cwd"]) == driver.path.resolve()
    assert call["argv"] == ["pr", "create", "--head", f"expgit/proposals/{pid}", "--base",
                            "main", "--title", subject, "--body-file", "-"]
    body = call["body_file"]
    description = driver.git("log", "-1", "--format=%b", commit)
    assert body.startswith(description.split("\n\nExpgit-Gradient:")[0])
    # the last paragraph is the trailers, as git reads them, and a squash merge (title,
    # blank line, body) keeps them
    assert git(driver.path, "interpret-trailers", "--parse", input=body).splitlines() == [
        f"Expgit-Proposal: {pid}", f"Expgit-Gradient: {gradient}"]
    squash = tr.parse_message(f"{subject}\n\n{body}")
    assert squash.value(tr.PROPOSAL) == pid and squash.values(tr.GRADIENT) == [gradient]


def test_pr_again_is_already_pushed_and_json_has_the_title_and_body(
        driver: Driver, seeded_repo: ExperienceRepository, forge: Path, stubs: Path,
        tmp_path: Path) -> None:
    pid, gradient = proposal(driver, seeded_repo)
    first = json.loads(driver.ok("pr", pid, "--json").out)
    assert_shape("pr", first)
    assert first["pushed"] is True and first["url"] is None and records(stubs) == []
    refs = remote_refs(forge)
    body_file = tmp_path / "body.md"
    again = json.loads(driver.ok("pr", pid, "--json", "--body-file", body_file).out)
    assert remote_refs(forge) == refs
    assert_shape("pr", again)
    assert again["base_branch"] == "main"
    assert again["pushed"] is False and again["proposal"] == pid and again["forge"] == "github"
    assert again["commit"] == driver.rev(f"expgit/proposals/{pid}")
    assert again["remote_url"] == str(forge) and again["branch"] == f"expgit/proposals/{pid}"
    assert body_file.read_text() == again["body"] == first["body"]
    assert again["body"].endswith(f"\n\nExpgit-Proposal: {pid}\nExpgit-Gradient: {gradient}\n")
    assert again["command"] == ["gh", "pr", "create", "--head", again["branch"], "--base",
                                "main", "--title", again["title"], "--body-file",
                                str(body_file)]
    human = driver.ok("pr", pid)
    assert human.out.startswith(f"expgit/proposals/{pid}: already pushed to origin")
    assert f"title: {again['title']}\n\n{again['body']}" in human.out
    assert human.out.rstrip().endswith(f"expgit pr {pid} --remote origin --open  (needs gh)")


def test_pr_open_with_glab(driver: Driver, seeded_repo: ExperienceRepository, forge: Path,
                           stubs: Path) -> None:
    pid, _ = proposal(driver, seeded_repo)
    data = json.loads(driver.ok("pr", pid, "--forge", "gitlab", "--open", "--json").out)
    assert data["forge"] == "gitlab" and data["url"] == URLS["glab"]
    [call] = records(stubs)
    assert call["cli"] == "glab"
    assert call["argv"] == ["mr", "create", "--source-branch", f"expgit/proposals/{pid}",
                            "--target-branch", "main", "--title", data["title"],
                            "--description", data["body"], "--yes"]


def test_forge_from_the_remote_url() -> None:
    assert remote_host("git@gitlab.example.com:group/repo.git") == "gitlab.example.com"
    assert remote_host("https://x:token@github.com/o/r.git") == "github.com"
    assert remote_host("/srv/git/experiences.git") is None
    assert remote_host("file:///srv/git/experiences.git") is None
    assert forge_for(None, "ssh://git@gitlab.com/group/repo.git").name == "gitlab"
    assert forge_for(None, "https://github.com/o/r.git").name == "github"
    assert forge_for(None, "/srv/git/experiences.git").name == "github"  # the default
    assert forge_for("gitlab", "https://github.com/o/r.git").name == "gitlab"


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_pr_unknown_remote_exit_2(driver: Driver, seeded_repo: ExperienceRepository,
                                  forge: Path, stubs: Path) -> None:
    pid, _ = proposal(driver, seeded_repo)
    refs = remote_refs(forge)
    result = driver.fails(2, "pr", pid, "--remote", "upstream", "--open")
    assert one_line(result.err) == ("expgit: error: unknown remote 'upstream' (list the "
                                    "remotes with `git remote -v`)")
    assert remote_refs(forge) == refs and records(stubs) == []


@pytest.mark.parametrize("close", ["apply", "reject"])
def test_pr_of_a_closed_proposal_exit_3(driver: Driver, seeded_repo: ExperienceRepository,
                                        forge: Path, stubs: Path, close: str) -> None:
    pid, _ = proposal(driver, seeded_repo)
    driver.ok(close, pid, *(["--reason", "no"] if close == "reject" else []))
    refs = remote_refs(forge)
    result = driver.fails(3, "pr", pid, "--open")
    state = "applied" if close == "apply" else "rejected"
    assert one_line(result.err).startswith(f"expgit: error: proposal {pid} was already {state}")
    assert remote_refs(forge) == refs and records(stubs) == []


def test_pr_refuses_a_remote_branch_with_other_content(
        driver: Driver, seeded_repo: ExperienceRepository, forge: Path, stubs: Path) -> None:
    pid, _ = proposal(driver, seeded_repo)
    main = driver.rev()
    driver.git("push", "-q", "origin", f"main:refs/heads/expgit/proposals/{pid}")
    refs = remote_refs(forge)
    result = driver.fails(3, "pr", pid, "--open")
    assert one_line(result.err).startswith(
        f"expgit: error: 'origin' already has expgit/proposals/{pid} at {main[:12]}, not at "
        f"proposal {pid} (nothing was pushed;")
    assert remote_refs(forge) == refs and records(stubs) == []


def test_pr_open_without_the_forge_cli_pushes_nothing_and_prints_the_commands(
        driver: Driver, seeded_repo: ExperienceRepository, forge: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    pid, _ = proposal(driver, seeded_repo)
    refs = remote_refs(forge)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # git, but no gh
    result = driver.fails(2, "pr", pid, "--open", "--body-file", tmp_path / "body.md")
    assert one_line(result.err) == (
        "expgit: error: gh (GitHub CLI, https://cli.github.com) is needed to open the pull "
        "request and is not on PATH (nothing was pushed; install gh from "
        "https://cli.github.com, or run the commands printed above)")
    assert remote_refs(forge) == refs
    head, push, open_pr = result.out.splitlines()
    assert head == "run these commands to push the branch and open the pull request:"
    # the printed commands work as pasted, once gh is there
    record = install_stubs(tmp_path / "stubs", "gh")
    env = {"PATH": f"{tmp_path / 'stubs'}:/usr/bin:/bin", "FORGE_STUB_RECORD": str(record),
           "HOME": str(tmp_path)}
    for line in (push, open_pr):
        proc = subprocess.run(["bash", "-c", line], cwd=driver.path, env=env,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    commit = driver.rev(f"expgit/proposals/{pid}")
    assert git(forge, "rev-parse", f"refs/heads/expgit/proposals/{pid}").strip() == commit
    [call] = records(record)
    assert call["body_file"] == (tmp_path / "body.md").read_text()
    assert f"\n\nExpgit-Proposal: {pid}\nExpgit-Gradient: " in call["body_file"]


def test_pr_inline_body_command_when_gh_is_missing_is_pasteable(
        driver: Driver, seeded_repo: ExperienceRepository, forge: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    pid, _ = proposal(driver, seeded_repo)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    result = driver.fails(2, "pr", pid, "--open", "--json")
    error = json.loads(result.out)
    assert error["exit_code"] == 2 and "gh (GitHub CLI" in error["error"]
    lines = result.err.split("\n  ")  # the commands went to stderr: stdout is the JSON
    open_pr = lines[2].split("\nexpgit: error:")[0]
    record = install_stubs(tmp_path / "stubs", "gh")
    proc = subprocess.run(["bash", "-c", open_pr], cwd=driver.path, capture_output=True,
                          text=True, env={"PATH": f"{tmp_path / 'stubs'}:/usr/bin:/bin",
                                          "FORGE_STUB_RECORD": str(record)})
    assert proc.returncode == 0, proc.stderr
    [call] = records(record)
    _, expected = pr_text(find_proposal(seeded_repo, pid))
    assert call["argv"][call["argv"].index("--body") + 1] == expected
    assert "'" in expected  # the quoting mattered: the description holds a quote


def test_pr_forge_cli_failure_after_the_push_is_exit_1_and_a_rerun_opens_it(
        driver: Driver, seeded_repo: ExperienceRepository, forge: Path, stubs: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    pid, _ = proposal(driver, seeded_repo)
    monkeypatch.setenv("FORGE_STUB_FAIL", "1")
    result = driver.fails(1, "pr", pid, "--open")
    assert one_line(result.err).startswith(
        "expgit: error: gh pr create failed: GraphQL: the forge refused the pull request "
        "(the branch is pushed;")
    commit = driver.rev(f"expgit/proposals/{pid}")
    assert git(forge, "rev-parse", f"refs/heads/expgit/proposals/{pid}").strip() == commit
    monkeypatch.delenv("FORGE_STUB_FAIL")
    again = driver.ok("pr", pid, "--open")
    assert again.out.splitlines() == [
        f"expgit/proposals/{pid}: already pushed to origin ({forge})", f"opened: {URLS['gh']}"]
    assert len(records(stubs)) == 2
