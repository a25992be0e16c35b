"""``expgit apply --remote``: a bare server with its push checks, two clones.

The race in which someone else pushes between our fetch and our push is made
deterministic with a ``pre-push`` hook in clone A that, the first time only, runs clone
B's ``expgit apply --remote``: when A's push reaches the server, main has moved, and the
lease refuses it.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, edited, fsck, git, run_expgit

from expgit.errors import EXIT_CONFLICT
from expgit.hooks.install import hooks_dir
from expgit.store.format import trailers as tr
from expgit.store.refnames import PROPOSAL_STATES, PROPOSALS
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import GradientRequest, propose
from expgit.store.workflow.proposals import merge


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hooks and child processes import this checkout's expgit even when it is not
    installed."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


@pytest.fixture
def server(bare_repo: ExperienceRepository) -> Path:
    hooks = hooks_dir(bare_repo.git)
    assert (hooks / "pre-receive").exists()  # valid pushes must pass the server checks
    return bare_repo.git.git_dir


def clone(server: Path, name: str) -> Path:
    git(server.parent, "clone", "-q", str(server), name)
    return server.parent / name


def make_proposal(path: Path, name: str, note: str) -> tuple[str, str]:
    """(proposal id, new text) of a one-experience proposal made in clone ``path``."""
    repo = ExperienceRepository.open(path)
    text = edited(name, f"\n{note}\n", repo)
    gradient = propose(repo, GradientRequest(name=name, content=text, rationale=note))
    return merge(repo, [gradient.id]).id, text


def apply_remote(path: Path, pid: str) -> subprocess.CompletedProcess[str]:
    return run_expgit("-C", path, "apply", "--remote", "origin", pid, "--json")


def main_of(path: Path) -> str:
    return git(path, "rev-parse", "refs/heads/main").strip()


def text_on(path: Path, rev: str, name: str) -> str:
    return git(path, "show", f"{rev}:experiences/{name}.md")


def is_open(path: Path, pid: str) -> bool:
    return bool(git(path, "for-each-ref", PROPOSALS + pid).strip())


def install_pre_push(path: Path, script: str) -> Path:
    """A pre-push hook in clone ``path`` that runs ``script`` the first time only."""
    marker = path.parent / f"{path.name}.pre-push-ran"
    hook = path / ".git" / "hooks" / "pre-push"
    hook.write_text(f"#!/bin/sh\ncat >/dev/null\n[ -e '{marker}' ] && exit 0\n"
                    f": > '{marker}'\n{script}\n")
    hook.chmod(hook.stat().st_mode | stat.S_IEXEC)
    return marker


def expgit_line(*args: str | Path) -> str:
    quoted = " ".join(f"'{a}'" for a in (sys.executable, "-m", "expgit", *args))
    return quoted + " </dev/null"


# ----------------------------------------------------------------------------- tests
@pytest.mark.slow
def test_apply_remote_pushes_and_local_main_follows(server: Path) -> None:
    a = clone(server, "a")
    base = main_of(server)
    pid, text = make_proposal(a, "refund-method-rules", "Quote refunds per method.")

    proc = apply_remote(a, pid)

    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["remote"] == "origin" and result["attempts"] == 1
    assert result["previous"] == base and not result["rebased"]
    assert main_of(server) == result["commit"]
    assert main_of(a) == result["commit"]
    assert git(a, "rev-parse", "refs/remotes/origin/main").strip() == result["commit"]
    assert (a / "experiences" / "refund-method-rules.md").read_text() == text
    assert git(a, "status", "--porcelain") == ""
    assert not is_open(a, pid)
    assert git(a, "for-each-ref", PROPOSAL_STATES["applied"] + pid).strip()
    fsck(server)


@pytest.mark.slow
def test_lease_refused_push_is_fetched_guarded_rebuilt_and_retried(server: Path) -> None:
    a, b = clone(server, "a"), clone(server, "b")
    base = main_of(server)
    pid_a, text_a = make_proposal(a, "refund-method-rules", "A: quote refunds per method.")
    pid_b, text_b = make_proposal(b, "flight-change-rules", "B: check fare rules first.")
    b_out = server.parent / "b-apply.json"
    marker = install_pre_push(a, expgit_line("-C", b, "apply", "--remote", "origin", pid_b,
                                             "--json") + f" > '{b_out}' || exit 1")

    proc = apply_remote(a, pid_a)

    assert proc.returncode == 0, proc.stderr
    assert marker.exists()
    result_b = json.loads(b_out.read_text())
    result_a = json.loads(proc.stdout)
    assert result_b["attempts"] == 1 and not result_b["rebased"]
    assert result_a["attempts"] == 2 and result_a["rebased"]
    assert result_a["previous"] == result_b["commit"]

    head = main_of(server)
    assert head == result_a["commit"]
    assert git(server, "rev-list", "--first-parent", "main").split() == [
        result_a["commit"], result_b["commit"], base]
    assert git(server, "rev-list", "--merges", "main").split() == []
    assert text_on(server, head, "refund-method-rules") == text_a
    assert text_on(server, head, "flight-change-rules") == text_b
    message = tr.parse_message(git(server, "log", "-1", "--format=%B", head))
    assert message.value(tr.REBASED_FROM) == git(a, "rev-parse", pid_a).strip()

    # each clone's main followed its own push; A's work tree has both edits now
    assert main_of(a) == head and main_of(b) == result_b["commit"]
    assert (a / "experiences" / "flight-change-rules.md").read_text() == text_b
    assert git(a, "status", "--porcelain") == ""
    assert not is_open(a, pid_a) and not is_open(b, pid_b)
    fsck(server)
    fsck(a)


@pytest.mark.slow
def test_conflicting_edit_pushed_first_refuses_apply(server: Path) -> None:
    a, b = clone(server, "a"), clone(server, "b")
    pid_a, _ = make_proposal(a, "refund-method-rules", "A: refunds take 5-7 days.")
    pid_b, text_b = make_proposal(b, "refund-method-rules", "B: refunds go to the card.")
    local_a = main_of(a)

    proc_b = apply_remote(b, pid_b)
    assert proc_b.returncode == 0, proc_b.stderr
    pushed = json.loads(proc_b.stdout)["commit"]

    proc = apply_remote(a, pid_a)

    assert proc.returncode == EXIT_CONFLICT, proc.stderr
    assert "refund-method-rules" in proc.stderr
    assert main_of(server) == pushed
    assert text_on(server, "main", "refund-method-rules") == text_b
    assert main_of(a) == local_a  # nothing written in A
    assert is_open(a, pid_a)
    fsck(server)


@pytest.mark.slow
def test_conflicting_push_during_our_push_refuses_after_refetch(server: Path) -> None:
    a, b = clone(server, "a"), clone(server, "b")
    pid_a, _ = make_proposal(a, "refund-method-rules", "A: refunds take 5-7 days.")
    pid_b, text_b = make_proposal(b, "refund-method-rules", "B: refunds go to the card.")
    b_out = server.parent / "b-apply.json"
    install_pre_push(a, expgit_line("-C", b, "apply", "--remote", "origin", pid_b,
                                    "--json") + f" > '{b_out}' || exit 1")
    local_a = main_of(a)

    proc = apply_remote(a, pid_a)

    assert proc.returncode == EXIT_CONFLICT, proc.stderr
    assert "refund-method-rules" in proc.stderr
    pushed = json.loads(b_out.read_text())["commit"]
    assert main_of(server) == pushed
    assert text_on(server, "main", "refund-method-rules") == text_b
    assert main_of(a) == local_a and is_open(a, pid_a)


@pytest.mark.slow
def test_push_that_landed_although_reported_failed_counts_as_applied(server: Path
                                                                      ) -> None:
    """The connection drops after the server took the push: the client sees a failure,
    but the re-fetched main is our own commit. That is success, not a conflict."""
    a = clone(server, "a")
    pid, text = make_proposal(a, "refund-method-rules", "Quote refunds per method.")
    # push what git is about to push, then report failure to the pushing git
    install_pre_push(a, "git push -q --no-verify origin \"$(git rev-parse "
                        "refs/heads/expgit/proposals/" + pid + ")\":refs/heads/main "
                        ">/dev/null 2>&1\nexit 1")

    proc = apply_remote(a, pid)

    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert main_of(server) == result["commit"] == main_of(a)
    assert text_on(server, "main", "refund-method-rules") == text
    assert not is_open(a, pid)


@pytest.mark.slow
def test_push_refused_by_the_server_is_an_error_and_changes_nothing(server: Path) -> None:
    legacy = server / "hooks" / "pre-receive.legacy"
    legacy.write_text("#!/bin/sh\necho 'closed for maintenance' >&2\nexit 1\n")
    legacy.chmod(0o755)
    a = clone(server, "a")
    before = main_of(server)
    pid, _ = make_proposal(a, "refund-method-rules", "Quote refunds per method.")

    proc = apply_remote(a, pid)

    assert proc.returncode == 1, proc.stderr
    assert "refused" in proc.stderr and "closed for maintenance" in proc.stderr
    assert main_of(server) == before == main_of(a)
    assert is_open(a, pid)


@pytest.mark.slow
def test_diverged_local_main_is_left_alone_with_a_warning(server: Path) -> None:
    a = clone(server, "a")
    pid, text = make_proposal(a, "refund-method-rules", "Quote refunds per method.")
    git(a, "commit", "-q", "--allow-empty", "--no-verify", "-m", "local only")
    local = main_of(a)

    proc = apply_remote(a, pid)

    assert proc.returncode == 0, proc.stderr
    assert "diverged" in proc.stderr
    assert main_of(a) == local
    assert text_on(server, "main", "refund-method-rules") == text
    assert not is_open(a, pid)  # applied on the remote: closed here too


def test_local_main_moving_after_the_push_still_closes_the_proposal(
        server: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import expgit.store.workflow.apply as apply_module

    a = clone(server, "a")
    pid, text = make_proposal(a, "refund-method-rules", "Quote refunds per method.")
    from expgit.store.workflow.publish import publish as real_publish

    def racing_publish(*args, **kwargs):  # type: ignore[no-untyped-def]
        git(a, "commit", "-q", "--allow-empty", "--no-verify", "-m", "by hand")
        return real_publish(*args, **kwargs)

    monkeypatch.setattr("expgit.store.workflow.apply.publish", racing_publish)
    result = apply_module.apply_proposal(ExperienceRepository.open(a), pid, remote="origin")
    local = main_of(a)
    assert main_of(server) == result.commit != local
    assert git(a, "log", "-1", "--format=%s", local).strip() == "by hand"
    assert text_on(server, "main", "refund-method-rules") == text
    assert any("was not moved" in w for w in result.warnings)
    assert not is_open(a, pid)


@pytest.mark.slow
def test_clones_pushing_at_once_all_land_in_a_linear_history(server: Path) -> None:
    """No lock spans clones: the lease and the guard alone sort out who goes first."""
    names = ["refund-method-rules", "flight-change-rules", "checked-baggage-allowance",
             "when-to-transfer-to-human"]
    base = main_of(server)
    clones = [clone(server, f"c{i}") for i in range(len(names))]
    made = [(path, *make_proposal(path, name, f"Clone {path.name} learned this."))
            for path, name in zip(clones, names, strict=True)]

    procs = [subprocess.Popen([sys.executable, "-m", "expgit", "-C", str(path), "apply",
                               "--remote", "origin", pid, "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for path, pid, _text in made]
    outputs = [(p.communicate(timeout=600), p.returncode) for p in procs]

    for (_out, err), code in outputs:
        assert code == 0, err
    results = [json.loads(out) for (out, _err), _code in outputs]
    head = main_of(server)
    history = git(server, "rev-list", "--first-parent", f"{base}..main").split()
    assert sorted(history) == sorted(r["commit"] for r in results)
    assert git(server, "rev-list", f"{base}..main").split() == history
    for (_path, _pid, text), name in zip(made, names, strict=True):
        assert text_on(server, head, name) == text
    assert sum(r["attempts"] for r in results) >= len(names)
    fsck(server)
