"""One error hierarchy; each kind of failure maps to one process exit code.

The CLI's single handler in :func:`expgit.cli.main` prints ``expgit: <message>`` and,
when the error carries one, a ``hint:`` line saying what to do, then exits with the
class's ``exit_code``. Library callers catch :class:`ExpgitError` (or a subclass).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_CONFLICT = 3
EXIT_LOCKED = 4
EXIT_INVALID = 5
EXIT_GATE = 6
EXIT_RUN_ERRORS = 7


class ExpgitError(Exception):
    """Base of every error expgit raises on purpose."""

    exit_code = EXIT_UNEXPECTED
    # what the exit code means, as ``expgit --help`` lists it (see :func:`exit_codes`)
    meaning = "unexpected error (set EXPGIT_DEBUG=1 for a traceback)"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(ExpgitError):
    """The command was called in a way that cannot work (wrong repository kind, ...)."""

    exit_code = EXIT_USAGE
    meaning = "usage: bad arguments, not an expgit repository, target folder not empty"


class InvalidInputError(ExpgitError):
    """Bad input: a malformed experience, a bad name, an unknown id or revision."""

    exit_code = EXIT_INVALID
    meaning = "invalid input: a malformed experience, a bad name, an unknown id or revision"


class ValidationError(InvalidInputError):
    """One or more experience files break the schema; ``problems`` lists each one."""

    def __init__(self, problems: list[str], *, hint: str | None = None) -> None:
        self.problems = list(problems)
        head = problems[0] if len(problems) == 1 else f"{len(problems)} problems: " + "; ".join(
            problems[:5]
        ) + ("; ..." if len(problems) > 5 else "")
        super().__init__(head, hint=hint)


class NotFoundError(InvalidInputError):
    """A gradient, proposal, experience or revision that does not exist."""


class NotRegularFileError(InvalidInputError):
    """A path named as an input file is a named pipe, socket, device or folder: it is
    not read (a pipe with no writer would block for ever)."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(f"{path}: {kind}, not a regular file: not read")
        self.kind = kind  # "a named pipe"


class ConflictError(ExpgitError):
    """The change cannot be made without overwriting someone else's: guard or merge conflict."""

    exit_code = EXIT_CONFLICT
    meaning = "conflict: the base-content guard, a merge conflict, a proposal already closed"

    def __init__(
        self, message: str, *, conflicts: list[str] | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.conflicts = list(conflicts or [])


class LockHeldError(ExpgitError):
    """Another live expgit writer holds the repository lock."""

    exit_code = EXIT_LOCKED
    meaning = "a lock is held: the repository lock by a live writer, or a running git's"


class GateError(ExpgitError):
    """The regression gate did not pass a proposal: it lowered the held-out eval, or
    its eval could not be decided. The proposal stays open for review."""

    exit_code = EXIT_GATE
    meaning = "gate: a proposal lowered the held-out eval or could not be measured; not applied"


class RunErrorsError(ExpgitError):
    """A run finished, but some of its LLM calls, training steps or rollouts failed.
    What it made (trajectories, gradients, proposals) is kept."""

    exit_code = EXIT_RUN_ERRORS
    meaning = "a run finished with errors (failed LLM calls, steps or rollouts, spent budget)"


class ToolServerError(RunErrorsError):
    """A rollout's tool environment itself failed (its MCP server did not start, died,
    hung past the call time limit, answered malformed JSON-RPC): that rollout ends with
    this cause, recorded as its error; the run goes on (and exits 7)."""


class GitError(ExpgitError):
    """A git command failed in a way expgit did not expect."""


def exit_codes() -> dict[int, str]:
    """Every exit code, lowest first, and what it means: 0 (ok), then each error kind's,
    from the first class that sets it (its ``meaning``)."""
    found = {EXIT_OK: "ok"}
    pending: list[type[ExpgitError]] = [ExpgitError]
    while pending:
        kind = pending.pop(0)
        if "exit_code" in vars(kind):
            found.setdefault(kind.exit_code, kind.meaning)
        pending += kind.__subclasses__()
    return dict(sorted(found.items()))
