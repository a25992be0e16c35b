"""``[skills]`` and ``[agent]`` of ``expgit.toml``: what the agents read and how the
tool-calling agent meets its tools and skills (re-exported by
:mod:`expgit.store.format.settings`)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class SettingsTable(BaseModel):
    """A table of ``expgit.toml``: an unknown key is an error, and settings never change."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SkillSettings(SettingsTable):
    """``[skills]``: checks of what the agents will read, and the files of a skill folder
    (``layout = "skills"``). ``scanner = "cisco"``: Cisco's skill-scanner (``pip install
    'expgit[scanner]'``) scans the experiences in ``validate`` and the hooks, after
    expgit's own injection rules (:mod:`expgit.store.format.skill_scanner`)."""

    scanner: Literal["none", "cisco"] = Field(default="none", description=(
        '"cisco": Cisco\'s skill-scanner also scans the experiences in `expgit validate` '
        "and the hooks."))
    max_file_bytes: int = Field(default=1024 * 1024, gt=0, description=(
        "A file of a skill folder (reference, script, asset) larger than this is "
        "refused."))
    always_on_files: tuple[str, ...] = Field(default=("AGENTS.md",), description=(
        'Files at the repository\'s root that hold the always-on block (the skills with '
        'metadata expgit-always: "true"), written with every change of them.'))

    @field_validator("always_on_files")
    @classmethod
    def _root_files(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            path = PurePosixPath(name)
            if not name or path.is_absolute() or ".." in path.parts or name != str(path) \
                    or name.startswith(".expgit/") or "\0" in name:
                raise ValueError(f"{name!r}: must be a file path inside the repository, "
                                 "such as 'AGENTS.md' or 'CLAUDE.md'")
        if len(set(value)) != len(value):
            raise ValueError("names a file twice")
        return value
    stale_days: int = Field(default=30, gt=0, description=(
        "`expgit status` names the active skills no ingested session loaded in this many "
        "days (once the sessions span that long; docs/skill-usage.md)."))


class McpSettings(SettingsTable):
    """``[agent.mcp]``: the MCP server the tool-calling agent takes its tools from: a
    ``command`` (with ``args`` and ``env``: a stdio server, one process per rollout) or a
    ``url`` (streamable HTTP, one session per rollout). See docs/mcp-tools.md."""

    command: str | None = Field(default=None, min_length=1, description=(
        "The command of a stdio server, one process per rollout."))
    args: list[str] = Field(default_factory=list,
                            description="The stdio server's arguments.")
    env: dict[str, str] = Field(default_factory=dict, description=(
        "Environment variables of the stdio server."))
    url: str | None = Field(default=None, pattern=r"^https?://", description=(
        "The http:// or https:// URL of a streamable HTTP server, one session per "
        "rollout."))
    call_timeout_seconds: float = Field(default=30.0, gt=0, le=3600, description=(
        "Each tool call is given this long; then the rollout ends with that cause."))
    start_timeout_seconds: float = Field(default=60.0, gt=0, le=3600, description=(
        "The server's start and its tool listing are given this long."))
    state_key_argument: str | None = Field(default=None, min_length=1, description=(
        "Set: every call gets this argument set to the rollout's own key (hidden from "
        "the model)."))

    @model_validator(mode="after")
    def _one_transport(self) -> McpSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a stdio server) or url (streamable "
                             "HTTP), not both and not neither")
        return self


class AgentSettings(SettingsTable):
    """``[agent]``: where the tool-calling agent's tools come from, and how it meets the
    skills (docs/skill-listing.md). ``skills = "listing"``: its system prompt holds the
    always-on skills and a listing of the others (name, description, location) within
    the listing budget, and it loads a skill's body only by calling the ``Skill`` tool,
    as Claude Code and Codex do; ``"retrieval"``: the experiences chosen by relevance are
    in the prompt. Unset: listing for the tool-calling agent in the skills layout,
    retrieval otherwise; the single-turn agent (no tools) and a flat repository always
    use retrieval. The listing budget is ``listing_budget_percent`` of
    ``context_window_tokens`` (Claude Code's rule: 1% of the window), each description
    cut at ``listing_description_chars`` (Claude Code: 1,536)."""

    mcp: McpSettings | None = Field(default=None, description=(
        "The MCP server the tool-calling agent takes its tools from."))
    skills: Literal["listing", "retrieval"] | None = Field(default=None, description=(
        "How the tool-calling agent meets the skills (above)."))
    context_window_tokens: int = Field(default=200_000, gt=0, description=(
        "The agent model's context window, in tokens."))
    listing_budget_percent: float = Field(default=1.0, gt=0, le=100, description=(
        "The skill listing's budget, in percent of the context window."))
    listing_description_chars: int = Field(default=1536, ge=1, description=(
        "Each description in the listing is cut at this many characters."))

    @property
    def listing_budget_tokens(self) -> int:
        """The listing's budget in estimated tokens."""
        return max(1, int(self.context_window_tokens * self.listing_budget_percent / 100))
