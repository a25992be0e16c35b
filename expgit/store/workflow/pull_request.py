"""Pushing an open proposal's branch to a remote, and opening its pull request.

The pull request's title is the proposal's subject; its body is the proposal's
description followed by a trailer paragraph: ``Expgit-Proposal: <id>`` and the
proposal's ``Expgit-Gradient`` trailers. A forge's squash merge writes the title and the
body as the commit message, so the commit on ``main`` still names the proposal.

The push creates ``refs/heads/expgit/proposals/<id>`` on the remote and never moves an
existing branch: it is pushed with ``--force-with-lease=<branch>:`` (an empty expected
value: the push fails unless the branch is absent). A remote branch already at the
proposal commit is fine (``pushed`` is False). One with other content is refused
(exit 3). Everything that can be checked is checked before the push: the proposal is
open, the remote is known, and with ``open_pr`` the forge's CLI is on ``PATH``. So a
failed command has pushed nothing, and the only step after the push is the forge's CLI.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from expgit.errors import ConflictError, ExpgitError, UsageError
from expgit.git.operands import END_OF_OPTIONS, operand
from expgit.store.format import trailers as tr
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.apply import ensure_open
from expgit.store.workflow.forge import Forge, forge_for, run_forge, shell_line
from expgit.store.workflow.proposals import Proposal, find_proposal


class ForgeCliMissing(UsageError):
    """``--open`` without the forge's CLI: nothing was pushed; ``commands`` are the
    shell lines that push the branch and open the pull request by hand."""

    def __init__(self, forge: Forge, commands: list[str]) -> None:
        super().__init__(forge.missing,
                         hint=f"nothing was pushed; install {forge.cli} from "
                              f"{forge.install_url}, or run the commands printed above")
        self.commands = commands


@dataclass
class PullRequest:
    proposal: str
    commit: str
    remote: str
    remote_url: str
    branch: str
    base_branch: str  # the branch the pull request targets (main)
    forge: str
    title: str
    body: str
    pushed: bool  # False: the remote had the branch at the proposal commit already
    command: list[str]  # the forge CLI's create command (run with --open)
    url: str | None = None  # what the forge CLI printed: the new pull request


def pr_text(proposal: Proposal) -> tuple[str, str]:
    """(title, body) of the proposal's pull request; the body ends in its trailers."""
    trailers = ((tr.PROPOSAL, proposal.id),
                *((tr.GRADIENT, sha) for sha in proposal.gradient_commits))
    body = tr.Message(proposal.subject, proposal.description, trailers).render()
    return proposal.subject, body.split("\n\n", 1)[1]


def _remote_url(repo: ExperienceRepository, remote: str) -> str:
    proc = repo.git.run("remote", "get-url", END_OF_OPTIONS, operand(remote, "--remote"),
                        check=False)
    if proc.returncode != 0:
        raise UsageError(f"unknown remote {remote!r}",
                         hint="list the remotes with `git remote -v`")
    return proc.stdout.decode(errors="replace").strip()


def _remote_branch(repo: ExperienceRepository, remote: str, ref: str) -> str | None:
    proc = repo.git.run("ls-remote", "--refs", END_OF_OPTIONS, remote, ref, check=False)
    if proc.returncode != 0:
        raise UsageError(f"cannot read remote {remote!r}: "
                         + " ".join(proc.stderr.decode(errors="replace").split()),
                         hint="nothing was pushed; check the remote with `git remote -v`")
    for line in proc.stdout.decode().splitlines():
        sha, _, name = line.partition("\t")
        if name == ref:
            return sha
    return None


def _refuse_other(remote: str, branch: str, proposal: Proposal, found: str) -> ConflictError:
    return ConflictError(
        f"{remote!r} already has {branch} at {found[:12]}, not at proposal "
        f"{proposal.id}", hint="nothing was pushed; that branch is someone else's work: "
        "look at it, and delete it on the remote if it is stale")


def push_proposal(repo: ExperienceRepository, proposal_id: str, remote: str, *,
                  forge: str | None = None, open_pr: bool = False,
                  body_file: Path | None = None,
                  which: Callable[[str], str | None] = shutil.which) -> PullRequest:
    """Push the open proposal's branch to ``remote``; with ``open_pr``, open its pull
    request with the forge's CLI. ``body_file``: also write the body there."""
    proposal = find_proposal(repo, proposal_id)
    ensure_open(repo, proposal)
    url = _remote_url(repo, remote)
    chosen = forge_for(forge, url)
    branch = proposal.ref.removeprefix("refs/heads/")
    base = repo.settings.main_branch
    title, body = pr_text(proposal)
    shown_file = str(body_file) if body_file is not None else None
    if body_file is not None:
        body_file.write_text(body)
    if open_pr and which(chosen.cli) is None:
        raise ForgeCliMissing(chosen, [
            shell_line(["git", "push", remote, f"{proposal.ref}:{proposal.ref}"]),
            shell_line(chosen.command(branch, base, title, body, shown_file))])
    found = _remote_branch(repo, remote, proposal.ref)
    if found is not None and found != proposal.commit:
        raise _refuse_other(remote, branch, proposal, found)
    pushed = found is None and _push(repo, remote, branch, proposal)
    result = PullRequest(proposal.id, proposal.commit, remote, url, branch, base,
                         chosen.name, title, body, pushed,
                         chosen.command(branch, base, title, body, shown_file))
    if open_pr:
        argv = chosen.command(branch, base, title, body, shown_file or "-")
        result.url = run_forge(chosen, argv, repo.git.work_tree or repo.git.git_dir,
                               None if shown_file else body)
    return result


def _push(repo: ExperienceRepository, remote: str, branch: str, proposal: Proposal) -> bool:
    """Create the branch on the remote; True if this push created it."""
    push = repo.git.run("push", "--porcelain", f"--force-with-lease={proposal.ref}:",
                        END_OF_OPTIONS, remote, f"{proposal.ref}:{proposal.ref}", check=False)
    if push.returncode == 0:
        return True
    found = _remote_branch(repo, remote, proposal.ref)  # did someone create it meanwhile?
    if found == proposal.commit:
        return False
    if found is not None:
        raise _refuse_other(remote, branch, proposal, found)
    raise ExpgitError(f"push of {branch} to {remote!r} failed: " + " ".join(
        (push.stdout + push.stderr).decode(errors="replace").split()),
        hint=f"nothing was changed on {remote!r}")
