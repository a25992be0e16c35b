"""The ``expgit`` command line: thin click commands over the library, one handler for errors."""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from pathlib import Path

import click

from expgit import __version__
from expgit.cli.commands import LazyGroup
from expgit.errors import EXIT_UNEXPECTED, EXIT_USAGE, ExpgitError


@click.group(cls=LazyGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-C", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=Path("."), help="Run as if expgit was started in DIR (as git -C).")
@click.version_option(__version__, prog_name="expgit")
@click.pass_context
def cli(ctx: click.Context, directory: Path) -> None:
    """Keep an LLM agent's experiences in git: propose edits as gradients, merge them into
    reviewable proposals, apply them to main under a lock, and revert with git.

    \b
    Exit codes: 0 ok, 1 unexpected error, 2 usage, 3 conflict (guard or merge),
    4 repository locked by a live writer, 5 invalid input.
    """
    ctx.obj = {"directory": directory}


def _terminate(signum: int, _frame: object) -> None:
    # Unwind normally on SIGTERM (a CI or harness timeout) so locks are released.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
        signal.signal(signal.SIGTERM, _terminate)
    try:
        cli.main(args=argv, prog_name="expgit", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    except click.exceptions.Abort:
        click.echo("expgit: aborted", err=True)
        return EXIT_UNEXPECTED
    except ExpgitError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        click.echo(f"expgit: error: {exc.message}{hint}", err=True)
        return exc.exit_code
    except Exception as exc:  # the one place unexpected errors are reported
        if os.environ.get("EXPGIT_DEBUG"):
            traceback.print_exc()
        click.echo(f"expgit: unexpected error: {type(exc).__name__}: {exc} "
                   "(set EXPGIT_DEBUG=1 for a traceback)", err=True)
        return EXIT_UNEXPECTED
    return 0


def run() -> None:
    sys.exit(main())
