"""The forges whose command-line tools open a pull request for a pushed proposal branch.

A typed registry: each :class:`Forge` names its CLI (``gh``, ``glab``), where to get it,
and how its "create" command takes the head branch, the base branch, the title and the
body. ``gh pr create`` reads the body from a file (``--body-file``, ``-`` for stdin) or
takes it inline (``--body``); ``glab mr create`` takes it inline only (``--description``)
and asks for confirmation unless given ``--yes``.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from expgit.errors import ExpgitError, UsageError


@dataclass(frozen=True)
class Forge:
    name: str
    cli: str
    label: str
    install_url: str
    host_word: str  # a remote whose host name contains it is on this forge

    def command(self, branch: str, base: str, title: str, body: str,
                body_file: str | None) -> list[str]:
        """The create command. ``body_file``: a path, ``-`` (stdin), or None (inline)."""
        if self.name == "gitlab":
            return [self.cli, "mr", "create", "--source-branch", branch, "--target-branch",
                    base, "--title", title, "--description", body, "--yes"]
        return [self.cli, "pr", "create", "--head", branch, "--base", base, "--title", title,
                *(["--body-file", body_file] if body_file else ["--body", body])]

    @property
    def missing(self) -> str:
        return (f"{self.cli} ({self.label}, {self.install_url}) is needed to open the pull "
                "request and is not on PATH")


FORGES: dict[str, Forge] = {
    "github": Forge("github", "gh", "GitHub CLI", "https://cli.github.com", "github"),
    "gitlab": Forge("gitlab", "glab", "GitLab CLI", "https://gitlab.com/gitlab-org/cli",
                    "gitlab"),
}
DEFAULT_FORGE = "github"


def remote_host(url: str) -> str | None:
    """The host name of a remote URL (``https://...``, ``ssh://...`` or scp-like
    ``user@host:path``); None for a local path."""
    if "://" in url:
        return (urlsplit(url).hostname or None) if not url.startswith("file:") else None
    head, colon, _ = url.partition(":")
    if not colon or "/" in head:
        return None
    return head.rpartition("@")[2].lower() or None


def forge_for(name: str | None, url: str) -> Forge:
    """The forge named, or the one the remote's host names; GitHub when neither says."""
    if name is not None:
        if name not in FORGES:
            raise UsageError(f"unknown forge {name!r}",
                             hint="use one of: " + ", ".join(sorted(FORGES)))
        return FORGES[name]
    host = remote_host(url) or ""
    return next((f for f in FORGES.values() if f.host_word in host), FORGES[DEFAULT_FORGE])


def shell_line(argv: list[str]) -> str:
    """``argv`` quoted for a POSIX shell, to paste."""
    return shlex.join(argv)


def run_forge(forge: Forge, argv: list[str], cwd: Path, stdin: str | None) -> str:
    """Run the forge's CLI; its standard output (the new pull request's URL)."""
    try:
        proc = subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, text=True)
    except OSError as exc:
        raise UsageError(f"cannot run {forge.cli}: {exc.strerror}",
                         hint=f"install it from {forge.install_url}") from None
    if proc.returncode != 0:
        detail = " ".join((proc.stderr or proc.stdout).split()) or f"exit {proc.returncode}"
        raise ExpgitError(f"{forge.cli} {' '.join(argv[1:3])} failed: {detail}",
                          hint="the branch is pushed; fix the cause and run the command "
                               "again, which does not push it twice")
    return proc.stdout.strip()
