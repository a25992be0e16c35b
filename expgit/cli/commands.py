"""The registry of subcommands: one module per command, listed here once."""

from __future__ import annotations

import click

from expgit.cli.apply import apply_cmd
from expgit.cli.env import env_group
from expgit.cli.export_sft import export_sft_cmd
from expgit.cli.history import list_cmd, log_cmd, show_cmd
from expgit.cli.hooks import hooks_group
from expgit.cli.init import init_cmd
from expgit.cli.learn import learn_cmd
from expgit.cli.merge import merge_cmd
from expgit.cli.outcomes import outcomes_group
from expgit.cli.propose import propose_cmd
from expgit.cli.revert import revert_cmd
from expgit.cli.review import gradients_cmd, proposals_cmd, reject_cmd, review_cmd
from expgit.cli.serve import serve_cmd
from expgit.cli.sessions import sessions_group
from expgit.cli.train import TRAIN_COMMANDS
from expgit.cli.validate import validate_cmd

ALL: list[click.Command] = [
    init_cmd, propose_cmd, merge_cmd, apply_cmd, gradients_cmd, proposals_cmd, review_cmd,
    reject_cmd, list_cmd, show_cmd, log_cmd, revert_cmd, validate_cmd, hooks_group,
    outcomes_group, learn_cmd,
    *TRAIN_COMMANDS, serve_cmd, env_group, export_sft_cmd, sessions_group,
]
