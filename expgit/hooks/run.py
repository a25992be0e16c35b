"""What the installed hook stubs run: ``python -m expgit.hooks.run <hook> [args...]``.

* ``pre-commit``: the staged experience files must be valid (as ``expgit validate``
  checks them: with no prompt-injection payload, and passing ``[skills] scanner`` when
  one is set), and the staged template overrides must render (in the sandbox, once,
  with a sample context).
* ``pre-receive`` (``old new ref`` lines on stdin) and ``update`` (args ``ref old new``):
  on the main branch only, refuse deleting it, refuse a non-fast-forward, and refuse new
  commits whose experience files (or ``expgit.toml``) are invalid. Other refs pass. The
  rules are those committed on the server's main; a push creating main uses its own.

``expgit-validate`` (a console script, the ``pre-commit`` framework's hook in
``.pre-commit-hooks.yaml``) runs the ``pre-commit`` check alone: the framework runs the
other hooks itself, and moves a hook that was there before it to ``pre-commit.legacy``,
which may be expgit's own stub, so chaining that from here would run it twice, or loop.

A ``<hook>.legacy`` next to the stub (a hook that was there before expgit's) runs first
with the same arguments and stdin; if it fails, its exit code is the hook's.

git runs hooks with the repository's environment (``GIT_DIR``, ``GIT_INDEX_FILE``, and
for pushes the quarantine object directory) and the right working directory, so the
``git`` processes started here see what git sees.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Callable

from expgit.errors import ExpgitError, InvalidInputError
from expgit.git.repo import ZERO_SHA, GitRepo
from expgit.hooks.install import LEGACY_SUFFIX, hooks_dir, is_stub
from expgit.store.format.settings import SETTINGS_FILE, Settings, parse_settings
from expgit.store.format.validate import validate_commit, validate_index, validate_staged_templates
from expgit.store.repository import ExperienceRepository, load_settings

HOOKS = ("pre-commit", "pre-receive", "update")
_PUSH = "expgit: push to main refused:"


def _refused(head: str, problems: list[str], advice: str) -> int:
    """Say why git must refuse (``head``, each problem, what to do): exit 1."""
    for line in (head, *(f"  {problem}" for problem in problems), advice):
        _err(line)
    return 1


def _err(line: str) -> None:
    print(line, file=sys.stderr)


def _run_legacy(git: GitRepo, hook: str, args: list[str], stdin: bytes | None) -> int:
    legacy = hooks_dir(git) / (hook + LEGACY_SUFFIX)
    if not legacy.is_file() or not os.access(legacy, os.X_OK):
        return 0  # like git, which skips hooks that are not executable
    if is_stub(legacy):
        # expgit's own stub, moved aside by another hook manager (`pre-commit install`
        # does that): running it would run this very check again, and it again, forever
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        return subprocess.run([str(legacy), *args], input=stdin).returncode
    except OSError as exc:
        if exc.errno != errno.ENOEXEC:
            raise
        # no #! line: like git, run it with the shell
        return subprocess.run(["/bin/sh", str(legacy), *args], input=stdin).returncode


def _pre_commit(repo: ExperienceRepository) -> int:
    problems = validate_index(repo) + validate_staged_templates(repo)
    if not problems:
        return 0
    return _refused("expgit: commit refused:", problems,
                    "fix the files listed above, stage them with `git add`, and commit again")


def _settings_at(git: GitRepo, commit: str) -> tuple[Settings | None, list[str]]:
    """The settings committed at ``commit`` (None if it has none) and their problems."""
    entry = git.path_entry(git.read_commit(commit).tree, SETTINGS_FILE)
    if entry is None:
        return None, []
    try:
        text = git.read_blob(entry.sha).decode("utf-8", "replace")
        return parse_settings(text, SETTINGS_FILE), []
    except InvalidInputError as exc:
        return None, [exc.message]


def _check_main_update(repo: ExperienceRepository, old: str, new: str) -> int:
    branch = repo.settings.main_branch
    if new == ZERO_SHA:
        _err(f"{_PUSH} deleting the branch {branch!r} is not allowed")
        return 1
    created = old == ZERO_SHA
    if not created and not repo.git.is_ancestor(old, new):
        _err(f"{_PUSH} {new[:12]} is not a fast-forward of {old[:12]}, the current tip of "
             f"{branch!r}; rewriting its history (force-push) is not allowed")
        _err(f"fetch {branch!r}, rebase or merge your work onto it, and push again")
        return 1
    settings, problems = _settings_at(repo.git, new)
    if created and settings is not None:  # a new main brings its own settings
        repo = ExperienceRepository(repo.git, settings)
    problems += validate_commit(repo, new, since=None if created else old)
    if not problems:
        return 0
    return _refused(f"{_PUSH} {len(problems)} problem{'s' if len(problems) != 1 else ''} in "
                    f"{new[:12]}:", problems,
                    "fix the files in a new commit on top, and push again")


def _pre_receive(repo: ExperienceRepository, stdin: bytes) -> int:
    status = 0
    for line in stdin.decode("utf-8", "replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == repo.main_ref:
            status = max(status, _check_main_update(repo, parts[0], parts[1]))
    return status


def _update(repo: ExperienceRepository, args: list[str]) -> int:
    if len(args) != 3:
        _err("expgit: the update hook needs three arguments: ref old new")
        return 2
    ref, old, new = args
    return _check_main_update(repo, old, new) if ref == repo.main_ref else 0


def _guarded(hook: str, action: Callable[[], int]) -> int:
    """Run ``action``; an error fails the hook (closed) with a readable message."""
    try:
        return action()
    except ExpgitError as exc:
        _err(f"expgit: {hook} hook failed: {exc.message}")
        if exc.hint:
            _err(f"hint: {exc.hint}")
    except Exception as exc:  # fail closed: a broken check must not let bad data in
        _err(f"expgit: {hook} hook failed unexpectedly: {type(exc).__name__}: {exc}")
    if hook == "pre-commit":
        _err("hint: once the cause is fixed, commit again; `git commit --no-verify` skips "
             "the check")
    return 1


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in HOOKS:
        _err(f"usage: python -m expgit.hooks.run {{{','.join(HOOKS)}}} [args...]")
        return 2
    hook, rest = args[0], args[1:]
    stdin = sys.stdin.buffer.read() if hook == "pre-receive" else None

    def checks() -> int:
        git = GitRepo.discover(".")
        try:
            status = _run_legacy(git, hook, rest, stdin)
            if status != 0:
                return status
            repo = ExperienceRepository(git, load_settings(git))
            if hook == "pre-commit":
                return _pre_commit(repo)
            if hook == "pre-receive":
                return _pre_receive(repo, stdin or b"")
            return _update(repo, rest)
        finally:
            git.close()

    return _guarded(hook, checks)


def validate_staged() -> None:
    """``expgit-validate``: the staged experience files must be valid (exit 1 if not)."""

    def check() -> int:
        git = GitRepo.discover(".")
        try:
            return _pre_commit(ExperienceRepository(git, load_settings(git)))
        finally:
            git.close()

    sys.exit(_guarded("pre-commit", check))


if __name__ == "__main__":
    sys.exit(main())
