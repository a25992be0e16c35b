"""Every command's ``--help`` (groups and their subcommands too) ends with an example,
and the top-level ``--help`` lists every exit code, generated from the error kinds of
expgit/errors.py, as docs/workflow.md's "Exit codes" table does."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
from click.testing import CliRunner
from conftest import ROOT

import expgit.errors
from expgit.cli import cli
from expgit.errors import exit_codes


def every_command(group: click.Group = cli, path: tuple[str, ...] = ()
                  ) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from every_command(command, (*path, name))


def help_of(*path: str) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def invokes(line: str, path: tuple[str, ...]) -> bool:
    """Whether the example ``line`` runs the command at ``path`` (after any ``-C DIR``)."""
    words = line.split()
    if words[:1] != ["expgit"]:
        return False
    words = words[1:]
    while words[:1] == ["-C"]:
        words = words[2:]
    return tuple(words[:len(path)]) == path


def test_every_command_and_subcommand_help_has_an_example() -> None:
    seen = list(every_command())
    assert {"sessions ingest", "outcomes add", "env serve", "review", "serve", "learn"} <= {
        " ".join(path) for path, _ in seen}
    missing = []
    for path, _command in seen:
        example = re.split(r"\n  Example[^\n]*:\n", help_of(*path))[1:]
        lines = example[0].split("\n\n")[0].splitlines() if example else []
        if not any(invokes(line, path) for line in lines):
            missing.append(" ".join(path))
    assert missing == [], f"no example in the --help of: {', '.join(missing)}"
    top = re.split(r"\n  Example:\n", help_of())[1].split("\n\n")[0].splitlines()
    assert invokes(top[0], ("init",))  # the top level's own


def test_top_level_help_lists_every_exit_code_of_the_error_kinds() -> None:
    constants = {value for name, value in vars(expgit.errors).items()
                 if name.startswith("EXIT_")}
    codes = exit_codes()
    assert set(codes) == constants == set(range(len(constants)))  # 0..7, none missing
    shown = help_of()
    listed = dict(re.findall(r"^    (\d+)  (.+)$", shown.partition("Exit codes:\n")[2],
                             re.MULTILINE))
    assert {int(code): meaning for code, meaning in listed.items()} == codes
    assert codes[expgit.errors.EXIT_GATE] == expgit.errors.GateError.meaning
    page = (ROOT / "docs" / "workflow.md").read_text().partition("## Exit codes\n")[2]
    table = [int(code) for code in re.findall(r"^\| (\d+) \|", page.partition("\n#")[0],
                                              re.MULTILINE)]
    assert table == sorted(codes)  # the page's table: the same codes, in order
