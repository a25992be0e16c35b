"""``[skills]`` and ``[agent]`` of ``expgit.toml``: what the agents read and how the
tool-calling agent meets its tools and skills (re-exported by
:mod:`expgit.store.settings`)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class SkillSettings(BaseModel):
    """``[skills]``: checks of what the agents will read, and the files of a skill folder
    (``layout = "skills"``). ``scanner = "cisco"``: Cisco's skill-scanner (``pip install
    'expgit[scanner]'``) scans the experiences in ``validate`` and the hooks, after
    expgit's own injection rules (:mod:`expgit.store.skill_scanner`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scanner: Literal["none", "cisco"] = "none"
    # a file of a skill folder (reference, script, asset) larger than this is refused
    max_file_bytes: int = Field(default=1024 * 1024, gt=0)
    # files at the repository's root that hold the always-on block (the skills with
    # metadata expgit-always: "true"), written with every change of them
    always_on_files: tuple[str, ...] = ("AGENTS.md",)

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
    # `status` names the active skills no ingested session loaded in this many days
    # (once the sessions span that long; docs/skill-usage.md)
    stale_days: int = Field(default=30, gt=0)


class McpSettings(BaseModel):
    """``[agent.mcp]``: the MCP server the tool-calling agent takes its tools from: a
    ``command`` (with ``args`` and ``env``: a stdio server, one process per rollout) or a
    ``url`` (streamable HTTP, one session per rollout). See docs/mcp-tools.md."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = Field(default=None, pattern=r"^https?://")
    # each tool call is given this long, the server's start (and its tool listing) the
    # other; then the rollout ends with that cause
    call_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    start_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    # set: every call gets this argument set to the rollout's own key (hidden from the model)
    state_key_argument: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_transport(self) -> McpSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a stdio server) or url (streamable "
                             "HTTP), not both and not neither")
        return self


class AgentSettings(BaseModel):
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

    model_config = ConfigDict(extra="forbid", frozen=True)

    mcp: McpSettings | None = None
    skills: Literal["listing", "retrieval"] | None = None
    context_window_tokens: int = Field(default=200_000, gt=0)
    listing_budget_percent: float = Field(default=1.0, gt=0, le=100)
    listing_description_chars: int = Field(default=1536, ge=1)

    @property
    def listing_budget_tokens(self) -> int:
        """The listing's budget in estimated tokens."""
        return max(1, int(self.context_window_tokens * self.listing_budget_percent / 100))
