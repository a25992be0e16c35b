"""The ``expgit`` command line: thin click commands over the library, one handler for errors.

May import: expgit.errors, expgit.resources, expgit.core, expgit.git, expgit.store,
expgit.hooks, expgit.llm, expgit.asgi, expgit.retrieval, expgit.train, expgit.outcomes,
expgit.remote, expgit.runs, expgit.sessions, expgit.learn, expgit.init, expgit.status
and expgit.service (the layers below it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

import click

from expgit import __version__
from expgit.cli._invocation import command_args
from expgit.cli._json import json_printed
from expgit.cli._terminal import safe_terminal
from expgit.cli.commands import LazyGroup
from expgit.errors import EXIT_UNEXPECTED, EXIT_USAGE, ExpgitError, UsageError, exit_codes
from expgit.git.env import anchored_paths
from expgit.git.maintenance import after_command


def exit_codes_help() -> str:
    """The exit codes for ``expgit --help``, from the error kinds (so they cannot drift)."""
    return "\b\nExit codes:\n" + "\n".join(f"  {code}  {meaning}"
                                           for code, meaning in exit_codes().items())


@click.group(cls=LazyGroup, epilog=exit_codes_help(),
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-C", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=Path("."), metavar="DIR",
              help="Run as if expgit was started in DIR, as git -C does: every relative "
                   "path, in any option or argument, is relative to DIR.")
@click.version_option(__version__, prog_name="expgit")
@click.pass_context
def cli(ctx: click.Context, directory: Path) -> None:
    """Keep an LLM agent's experiences in git: propose edits as gradients, merge them into
    reviewable proposals, apply them to main under a lock, and revert with git.

    \b
    Example:
      expgit init my-experiences --from example_repo
      expgit -C my-experiences status
      expgit -C my-experiences review PROPOSAL
    """
    if os.environ.get("NO_COLOR"):  # https://no-color.org: set and not empty
        ctx.color = False  # every command's context inherits it: click.echo strips ANSI
    if directory != Path("."):
        # relative GIT_DIR and friends keep naming what they named where expgit started
        os.environ.update(anchored_paths(os.environ, os.getcwd()))
        try:
            os.chdir(directory)  # restored by main() when the command ends
        except OSError as exc:
            raise UsageError(f"cannot change to {directory}: {exc.strerror}",
                             hint="-C takes an existing folder") from None


def usage_line(exc: click.ClickException) -> str:
    """click's error as one line: what is wrong, then where the command's help is (click
    itself prints a usage line, a hint and the error on three)."""
    message = " ".join(exc.format_message().split())
    ctx = exc.ctx if isinstance(exc, click.UsageError) else None
    if ctx is None:
        return message
    return f"{message} (see `{ctx.command_path} --help`)"


class Terminated(SystemExit):
    """SIGTERM (a CI or harness timeout, ``kill``): the command unwinds normally, so its
    locks are released and a commit it had not made is not made (every write ends in
    one compare-and-swap of a ref); the process exits with 128 + the signal's number
    (143), as a shell reports a process a signal ended."""


def _terminate(signum: int, _frame: object) -> None:
    raise Terminated(128 + signum)


def _wants_json(argv: list[str]) -> bool:
    """Whether the command line asks for ``--json`` (before any ``--``)."""
    return "--json" in (argv[:argv.index("--")] if "--" in argv else argv)


def _failed(code: int, message: str, hint: str | None, as_json: bool,
            prefix: str = "expgit: error: ") -> int:
    """Report a failure: one line on stderr and, under ``--json``, an object on stdout
    (``{"error": ..., "hint": ..., "exit_code": ...}``, the shape the services use),
    unless the command printed its own JSON result before it failed."""
    click.echo(f"{prefix}{message}" + (f" ({hint})" if hint else ""), err=True)
    if as_json and not json_printed.get():
        click.echo(json.dumps({"error": message, "hint": hint, "exit_code": code}))
    return code


def _maintain() -> None:
    """Git's automatic maintenance of the repositories the command wrote to, once its
    output is out (detached: it never delays the exit); problems are warnings only."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    for line in after_command():
        click.echo(f"expgit: warning: {line}", err=True)


def main(argv: list[str] | None = None) -> int:
    """Run one command; everything it prints passes through :func:`safe_terminal` (no
    control sequence a model or a session wrote reaches the terminal)."""
    with safe_terminal():
        return _run(argv)


def _run(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = _wants_json(args)
    json_printed.set(False)
    command_args.set(tuple(args))
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
        signal.signal(signal.SIGTERM, _terminate)
    started_in, environ = os.getcwd(), dict(os.environ)
    try:
        # a command's own ctx.exit(N) (doctor's verdict) comes back as the result
        code = cli.main(args=args, prog_name="expgit", standalone_mode=False)
        if isinstance(code, int) and not isinstance(code, bool):
            return code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except Terminated as exc:
        code = int(exc.code) if isinstance(exc.code, int) else 128 + signal.SIGTERM
        click.echo(f"expgit: stopped by SIGTERM (exit {code}): what the command had not "
                   "committed yet is not written", err=True)
        return code
    except click.ClickException as exc:
        code = EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
        return _failed(code, usage_line(exc), None, as_json)
    except click.exceptions.Abort:
        return _failed(EXIT_UNEXPECTED, "aborted", None, as_json, prefix="expgit: ")
    except ExpgitError as exc:
        return _failed(exc.exit_code, exc.message, exc.hint, as_json)
    except Exception as exc:  # the one place unexpected errors are reported
        if os.environ.get("EXPGIT_DEBUG"):
            traceback.print_exc()
        return _failed(EXIT_UNEXPECTED, f"{type(exc).__name__}: {exc}",
                       "set EXPGIT_DEBUG=1 for a traceback", as_json,
                       prefix="expgit: unexpected error: ")
    finally:  # -C moved this process: a caller of main() goes on where it was
        _maintain()
        os.chdir(started_in)
        if os.environ != environ:
            os.environ.clear()
            os.environ.update(environ)
    return 0


def run() -> None:
    sys.exit(main())
