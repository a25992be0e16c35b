"""The registry of subcommands: one module per command, listed here once.

A command's module is imported only when that command runs (or its own ``--help`` is
asked for), so ``expgit list`` never loads what ``expgit serve`` needs. ``expgit --help``
lists each command by its ``summary`` here; a test checks that each summary is the
command's own short help, so the two cannot drift apart.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import click


@dataclass(frozen=True)
class CommandEntry:
    name: str
    target: str  # "module:attribute" of the click command
    summary: str  # the command's short help, as `expgit --help` lists it

    def load(self) -> click.Command:
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command) or command.name != self.name:
            raise TypeError(f"{self.target} is not the click command {self.name!r}")
        return command


REGISTRY: tuple[CommandEntry, ...] = (
    CommandEntry("init", "expgit.cli.init:init_cmd",
                 "Create an experience repository in DIRECTORY (default: the -C folder)."),
    CommandEntry("propose", "expgit.cli.propose:propose_cmd",
                 "Propose one edit of experience NAME as a gradient commit on its own "
                 "branch."),
    CommandEntry("merge", "expgit.cli.merge:merge_cmd",
                 "Merge GRADIENTS (ids) into one proposal commit with a PR description."),
    CommandEntry("apply", "expgit.cli.apply:apply_cmd",
                 "Apply PROPOSAL to main under the repository lock."),
    CommandEntry("pr", "expgit.cli.pr:pr_cmd",
                 "Push PROPOSAL's branch to a remote and write its pull request's title "
                 "and body."),
    CommandEntry("migrate", "expgit.cli.migrate:migrate_cmd",
                 "Propose moving every experience to the skills layout, as one proposal."),
    CommandEntry("gradients", "expgit.cli.review:gradients_cmd",
                 "List gradients: one proposed edit each, with confidence and rationale."),
    CommandEntry("proposals", "expgit.cli.review:proposals_cmd",
                 "List proposals: merged gradients waiting for review (or applied, or "
                 "rejected)."),
    CommandEntry("review", "expgit.cli.review:review_cmd",
                 "Show a proposal or gradient: its description and a coloured diff per "
                 "experience."),
    CommandEntry("evidence", "expgit.cli.evidence:evidence_cmd",
                 "Show the evidence behind a gradient, a proposal or a trajectory (ID: a "
                 "unique prefix): each edit's rationale, prediction and check, the "
                 "trajectory it came from, that run's transcript with its tool calls, and "
                 "the evaluation per criterion."),
    CommandEntry("reject", "expgit.cli.review:reject_cmd",
                 "Reject a proposal (and its gradients) or a single gradient."),
    CommandEntry("status", "expgit.cli.status:status_cmd",
                 "Show main's tip and last update, open proposals and gradients, the lock, "
                 "sessions."),
    CommandEntry("list", "expgit.cli.listing:list_cmd",
                 "List the experiences on main (or at REV) with status, version and "
                 "summary."),
    CommandEntry("show", "expgit.cli.show:show_cmd",
                 "Print experience NAME's file (front matter and body)."),
    CommandEntry("context", "expgit.cli.context:context_cmd",
                 "Print the experiences an agent should read for QUERY, as a system prompt "
                 "section."),
    CommandEntry("log", "expgit.cli.log:log_cmd",
                 "Show each policy update on main (for NAME only if given), newest first: "
                 "description, merged gradients with evidence and confidence, author, "
                 "time, reverts."),
    CommandEntry("revert", "expgit.cli.revert:revert_cmd",
                 "Undo REV's experience changes in a new commit on main."),
    CommandEntry("doctor", "expgit.cli.doctor:doctor_cmd",
                 "Show what a crashed writer or a forge merge left behind, without "
                 "changing anything."),
    CommandEntry("validate", "expgit.cli.validate:validate_cmd",
                 "Check every experience file at REV (default: main): schema, name = file "
                 "name, token budget, layout, injection."),
    CommandEntry("hooks", "expgit.cli.hooks:hooks_group",
                 "Git hooks that refuse invalid experiences on commit and on push."),
    CommandEntry("outcomes", "expgit.cli.outcomes:outcomes_group",
                 "Typed outcomes: a verdict on a rollout, trajectory, experience or "
                 "proposal."),
    CommandEntry("learn", "expgit.cli.learn:learn_cmd",
                 "Learn offline from recorded rollouts: accuracy per task signature, "
                 "outcome coverage and per-experience statistics (metrics.json), findings "
                 "with stable ids (findings.json) and candidate experiences from "
                 "well-rated runs (experience_seed_pack.json)."),
    CommandEntry("train", "expgit.cli.train:train_cmd",
                 "Train the experiences on the --cases FILE: run each case, turn the runs "
                 "into trajectories (on the expgit/trajectories branch) and gradients, and "
                 "merge each batch's gradients into a proposal."),
    CommandEntry("eval", "expgit.cli.train_eval:eval_cmd",
                 "Evaluate the experiences on main with CASES: one rollout per case, "
                 "scored by its rubric (no training, nothing written)."),
    CommandEntry("train-rollouts", "expgit.cli.train_rollouts:train_rollouts_cmd",
                 "Train from recorded rollouts: FILE holds one Rollout JSON object per "
                 "line, each with its case (and, ideally, its evaluation)."),
    CommandEntry("report-html", "expgit.cli.report_html:report_html_cmd",
                 "Render a run report (the JSON of --report FILE) as one self-contained "
                 "HTML page."),
    CommandEntry("serve", "expgit.cli.serve:serve_cmd",
                 "Serve the training service: POST /v1/train/rollouts takes one Rollout "
                 "JSON object (its case, messages with tool calls as ToolParts, its "
                 "evaluation) and answers 202 with a job id; GET /v1/train/jobs/ID answers "
                 "the job's status and, once finished, its trajectory URI, gradient ids, "
                 "proposal id or applied commit, and errors."),
    CommandEntry("env", "expgit.cli.env:env_group",
                 "Environment services: a benchmark's cases and rollouts over HTTP "
                 "(docs/design.md), for `expgit train --env-url URL` and "
                 "`expgit eval --env-url URL`."),
    CommandEntry("mcp", "expgit.cli.mcp:mcp_cmd",
                 "Serve the experiences on main to an agent as an MCP server over stdio."),
    CommandEntry("export", "expgit.cli.export:export_cmd",
                 "Write the active skills of main (or REV) into DIR/.agents/skills/<name>/ "
                 "(whole folders, exact bytes), link each from DIR/.claude/skills/<name> "
                 "for Claude Code, and write the always-on block of DIR/AGENTS.md (not at "
                 "the user level, --to ~)."),
    CommandEntry("export-sft", "expgit.cli.export_sft:export_sft_cmd",
                 "Export the active, labelled task segments of ingested sessions (`expgit "
                 "sessions`) as OpenAI chat fine-tuning JSONL: one segment per line, tool "
                 "calls included, secrets and personal data redacted, each line validated "
                 "before the file is written."),
    CommandEntry("sessions", "expgit.cli.sessions:sessions_group",
                 "Agent sessions (.jsonl) -> task segments -> metrics -> experiences."),
)
BY_NAME: dict[str, CommandEntry] = {entry.name: entry for entry in REGISTRY}


class LazyGroup(click.Group):
    """A group whose subcommands come from :data:`REGISTRY`, each imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*BY_NAME, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in BY_NAME:
            self.add_command(BY_NAME[cmd_name].load())
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Lists every command by its registry summary, importing none of them."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows: list[tuple[str, str]] = []
        for name in names:
            loaded = self.commands.get(name)
            if loaded is None:  # a stand-in carrying the summary, shortened as click does
                loaded = click.Command(name, help=BY_NAME[name].summary)
            rows.append((name, loaded.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)
