"""The command registry: every command is listed once, loads lazily, and ``--help``
lists what the commands themselves say."""

from __future__ import annotations

import importlib
import pkgutil

import click
from click.testing import CliRunner

import expgit.cli
from expgit.cli import cli
from expgit.cli.commands import BY_NAME, REGISTRY, LazyGroup


def defined_top_level_commands() -> list[str]:
    """The names of the click commands defined in ``expgit.cli`` modules, minus the
    members of a group (``outcomes list`` is not ``list``)."""
    found: dict[int, click.Command] = {}
    members: set[int] = set()
    for info in pkgutil.iter_modules(expgit.cli.__path__):
        module = importlib.import_module(f"expgit.cli.{info.name}")
        for value in vars(module).values():
            if isinstance(value, click.Command) and value is not cli:
                found[id(value)] = value
                if isinstance(value, click.Group):
                    members.update(id(c) for c in value.commands.values())
    return sorted(c.name or "" for key, c in found.items() if key not in members)


def test_every_command_is_registered_once_and_loads() -> None:
    assert len(BY_NAME) == len(REGISTRY)
    assert sorted(BY_NAME) == defined_top_level_commands()
    for entry in REGISTRY:
        assert entry.load().name == entry.name


def test_each_summary_is_the_commands_own_short_help() -> None:
    for entry in REGISTRY:
        own = entry.load().get_short_help_str(limit=10_000)
        assert entry.summary == own, f"{entry.name}: update its summary in commands.py"


def test_help_lists_the_same_lines_before_and_after_the_commands_load() -> None:
    lazy = LazyGroup("expgit", help=cli.help, params=cli.params)
    before = CliRunner().invoke(lazy, ["--help"], terminal_width=100)
    assert lazy.commands == {}  # listing them imported none
    for name in lazy.list_commands(click.Context(lazy)):
        lazy.get_command(click.Context(lazy), name)
    after = CliRunner().invoke(lazy, ["--help"], terminal_width=100)
    assert len(lazy.commands) == len(REGISTRY)
    assert before.exit_code == after.exit_code == 0
    assert before.output == after.output
    assert "train-rollouts  Train from recorded rollouts" in before.output


def test_help_examples_use_only_options_the_command_has() -> None:
    """Each ``Example:`` line of a command's help runs that command with its own options."""
    checked = 0
    for entry in REGISTRY:
        command = entry.load()
        commands = (command.commands.values() if isinstance(command, click.Group)
                    else [command])
        for cmd in commands:
            help_text = cmd.help or ""
            if "Example:" not in help_text:
                continue
            options = {opt for param in cmd.params for opt in param.opts}
            example = help_text.split("Example:", 1)[1].replace("\\\n", " ")
            for line in example.splitlines():
                words = line.split("#")[0].split()
                if not words:
                    continue
                assert words[0] == "expgit", line
                used = {w.split("=")[0] for w in words if w.startswith("--")}
                assert used <= options | {"--help"}, f"{entry.name}: {line}"
                checked += 1
    assert checked >= 20
