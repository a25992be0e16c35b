"""Install expgit's git hooks: small shell stubs that run :mod:`expgit.hooks.run`.

A client install writes ``pre-commit``; a server install (for the bare repository people
push to) writes ``pre-receive`` and ``update``. The stubs come from the packaged
``hooks/`` folder with ``@PYTHON@`` replaced by the running interpreter, so a hook runs
the same expgit that installed it (a virtual environment's python keeps its packages).

Nothing is clobbered: a hook that is not an expgit stub is renamed to ``<hook>.legacy``
and run first by the stub; an expgit stub is simply rewritten, so installing again is
harmless.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from expgit.errors import UsageError
from expgit.git.repo import GitRepo
from expgit.resources import data_dir

CLIENT_HOOKS = ("pre-commit",)
SERVER_HOOKS = ("pre-receive", "update")
STUB_MARKER = "# expgit-hook-stub:"
LEGACY_SUFFIX = ".legacy"
_PLACEHOLDER = "@PYTHON@"


def hooks_dir(git: GitRepo) -> Path:
    """The folder git runs hooks from (``core.hooksPath`` if set), as an absolute path.

    ``git rev-parse --git-path hooks`` answers relative to the folder it runs in; a
    relative ``core.hooksPath`` is relative to where hooks run: the top of the work tree,
    or the git directory of a bare repository.
    """
    base = git.work_tree or git.git_dir
    text = git.run("rev-parse", "--git-path", "hooks", cwd=base).stdout.decode().strip()
    return (base / text).resolve()


def is_stub(path: Path) -> bool:
    """Whether ``path`` is a hook written by expgit (it carries the marker line)."""
    try:
        head = path.read_bytes()[:4096]
    except OSError:
        return False
    return STUB_MARKER.encode() in head


def render_stub(hook: str, python: str | None = None) -> str:
    template = (data_dir("hooks") / hook).read_text(encoding="utf-8")
    interpreter = python if python is not None else sys.executable
    if not interpreter:
        raise UsageError("cannot tell which python runs expgit (sys.executable is empty)",
                         hint="run `python -m expgit hooks install` with the python that "
                              "has expgit installed")
    # the template holds it between single quotes (POSIX sh): each ' becomes '\''
    return template.replace(_PLACEHOLDER, os.path.abspath(interpreter).replace("'", "'\\''"))


def _write_executable(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.expgit-tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o755)
    os.replace(tmp, path)


def _install_one(directory: Path, hook: str, python: str | None) -> list[str]:
    target = directory / hook
    legacy = directory / (hook + LEGACY_SUFFIX)
    stub = render_stub(hook, python)
    messages: list[str] = []
    if target.is_dir():
        raise UsageError(f"{target} is a folder, not a hook", hint="move it away and retry")
    if os.path.lexists(target) and not is_stub(target):
        if os.path.lexists(legacy):
            raise UsageError(
                f"cannot install the {hook} hook: {target} is not an expgit hook and "
                f"{legacy.name} exists too, so there is nowhere to keep it",
                hint=f"merge {target.name} into {legacy.name} (or remove one of them) and "
                     "run `expgit hooks install` again")
        os.replace(target, legacy)
        messages.append(f"moved the existing {hook} hook to {legacy}; expgit runs it first")
        verb = "installed"
    else:
        verb = "rewrote" if os.path.lexists(target) else "installed"
    _write_executable(target, stub)
    chained = f" (runs {legacy.name} first)" if os.path.lexists(legacy) else ""
    messages.append(f"{verb} the {hook} hook at {target}{chained}")
    return messages


def install_hooks(git: GitRepo, *, server: bool, python: str | None = None) -> list[str]:
    """Install the client (``pre-commit``) or server (``pre-receive``, ``update``) hooks.

    Returns one message per action taken. ``python`` overrides the interpreter the
    stubs run (default: the one running now).
    """
    if git.is_bare and not server:
        raise UsageError(
            f"{git.git_dir} is a bare repository: nobody commits there, so a pre-commit "
            "hook would never run",
            hint="install the push checks with `expgit hooks install --server`")
    directory = hooks_dir(git)
    directory.mkdir(parents=True, exist_ok=True)
    messages: list[str] = []
    for hook in SERVER_HOOKS if server else CLIENT_HOOKS:
        messages.extend(_install_one(directory, hook, python))
    return messages
