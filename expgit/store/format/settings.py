"""``expgit.toml``: the repository's settings, read from git (never from a working tree).

The file is read from the tip of the branch HEAD names (for a bare repository, its
default branch), so a server and every clone see the same committed settings.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from expgit.errors import InvalidInputError
from expgit.git.refs import plain_ref_name

# [skills] and [agent] live in their own module; they are read from here too
from expgit.store.format.settings_agent import AgentSettings as AgentSettings
from expgit.store.format.settings_agent import McpSettings as McpSettings
from expgit.store.format.settings_agent import SettingsTable
from expgit.store.format.settings_agent import SkillSettings as SkillSettings

SETTINGS_FILE = "expgit.toml"
# the branch folders of open gradients and proposals (:mod:`expgit.store.refnames`)
GRADIENT_BRANCHES = "expgit/gradients"
PROPOSAL_BRANCHES = "expgit/proposals"


def _branch_name(value: str) -> str:
    """A branch name as ``git check-ref-format --branch`` takes it (no control character,
    space, ``..``, ``~^:?*[\\``, ``@{``, leading ``-`` or ``.``, trailing ``.lock``), and
    not ``HEAD`` or a full ``refs/...`` name."""
    if (not value or value.startswith(("-", ".", "refs/")) or value in ("HEAD", "@")
            or not plain_ref_name(f"refs/heads/{value}")):
        shown = repr(value) if len(value) <= 60 else repr(value[:57]) + "..."
        raise ValueError(f"must be a plain branch name such as 'main' (as git "
                         f"check-ref-format --branch takes it), not {shown}")
    return value


BranchName = Annotated[str, AfterValidator(_branch_name)]
# the branches expgit keeps its own objects under: no setting may name one of them
_RESERVED = {"expgit's gradient branches": GRADIENT_BRANCHES,
             "expgit's proposal branches": PROPOSAL_BRANCHES}


def _clash(one: str, other: str) -> bool:
    """Whether two branches are one, or one is a folder of the other (git cannot keep
    ``a`` and ``a/b`` both)."""
    return one == other or one.startswith(other + "/") or other.startswith(one + "/")


class Price(BaseModel):
    """``[llm.prices."MODEL"]`` (or ``"*"``): the price of a million tokens."""

    prompt_per_million: float = Field(default=0.0, ge=0,
                                      description="The price of a million prompt tokens.")
    completion_per_million: float = Field(
        default=0.0, ge=0, description="The price of a million completion tokens.")

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """What these tokens cost at this price."""
        return (prompt_tokens * self.prompt_per_million
                + completion_tokens * self.completion_per_million) / 1e6


class LLMSettings(SettingsTable):
    """``[llm]``: the OpenAI-compatible endpoint. ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``
    and command-line flags override these; no endpoint at all means the embedded model."""

    base_url: str | None = Field(default=None, description=(
        "The endpoint's URL, such as http://127.0.0.1:8080/v1 (OPENAI_BASE_URL overrides "
        "it); unset, and no OPENAI_BASE_URL: the embedded model."))
    model: str = Field(default="gpt-4o-mini", description="The model name.")
    api_key_env: str = Field(default="OPENAI_API_KEY", description=(
        "The environment variable holding the API key (never the key itself)."))
    structured_output: Literal["json_schema", "json_object", "prompt"] = Field(
        default="json_schema", description=(
            "How replies are held to their JSON schema: the endpoint's strict "
            "json_schema, its json_object mode, or the prompt alone."))
    timeout_seconds: float = Field(default=60.0, gt=0,
                                   description="One HTTP request's time limit.")
    max_retries: int = Field(default=4, ge=0, description=(
        "Retries of a failed call after its first attempt."))
    call_deadline_seconds: float = Field(default=120.0, gt=0, description=(
        "One call's whole time, retries and waits included (a hung endpoint ends here)."))
    max_consecutive_failures: int = Field(default=3, ge=1, description=(
        "A batch run (train, eval, train-rollouts) stops calling after this many calls "
        "in a row the endpoint did not answer, and reports what it made."))
    run_deadline_seconds: float = Field(default=7200.0, gt=0, description=(
        "... or after this long."))
    max_calls: int | None = Field(default=None, ge=1, description=(
        "... or once it made this many calls; unset: unbounded (--max-calls overrides "
        "it)."))
    max_cost: float | None = Field(default=None, gt=0, description=(
        "... or once it spent this much, in `currency` at `prices`; unset: unbounded "
        "(--max-cost overrides it)."))
    currency: str = Field(default="USD", min_length=1, max_length=8,
                          description="The currency of `prices`.")
    temperature: float = Field(default=0.2, ge=0, le=2,
                               description="The sampling temperature.")
    max_tokens: int = Field(default=2048, gt=0,
                            description="The most tokens one reply may have.")
    embeddings_model: str | None = Field(default=None, description=(
        "The endpoint's embeddings model, for rankers that use embeddings; unset: none."))
    prices: dict[str, Price] = Field(default_factory=dict, description=(
        'The price per model name, or "*" for any other model.'))


MAX_GROUP_SIZE = 64  # [train] group_size and --group-size


class TrainSettings(SettingsTable):
    """``[train]``: budgets and batching of the training pipeline."""

    trajectories_branch: BranchName = Field(default="expgit/trajectories", description=(
        "The branch that keeps the training runs' trajectories."))
    tool_output_chars: int = Field(default=2000, gt=0, description=(
        "A tool output is cut to this many characters in the transcript a training "
        "call is shown."))
    relevant_experiences: int = Field(default=5, ge=0, description=(
        "The most relevant experiences a training call is shown in full."))
    relevance_floor: float = Field(default=0.3, ge=0, le=1, description=(
        "... of which those scoring under this share of the best match are left out (a "
        "file about another topic costs prompt tokens and invites a stray edit); 0 keeps "
        "them all."))
    gradients_per_chunk: int = Field(default=16, ge=1, le=64, description=(
        "The policy update merges gradients in chunks of at most this many, one `merge` "
        "call each."))
    total_token_budget: int = Field(default=200_000, gt=0, description=(
        "The budget of the whole set of experiences after a policy update, in estimated "
        "tokens (a plan may keep or shrink a set that is already over)."))
    max_gradients_per_update: int = Field(default=8, ge=1, description=(
        "The training service (`expgit serve`) trains a batch once this many gradients "
        "are pending."))
    max_wait_seconds: float = Field(default=10.0, gt=0, description=(
        "... or once the oldest pending gradient has waited this long."))
    gate: bool = Field(default=False, description=(
        "The regression gate of a run with held-out cases (--gate / --no-gate override "
        "it)."))
    gate_min_delta: float = Field(default=0.0, ge=-1, le=1, description=(
        "The gate's least accuracy delta, from -1 to 1."))
    gate_max_regressions: int = Field(default=0, ge=0, description=(
        "The cases the gate lets go pass -> fail."))
    max_copied_words: int = Field(default=12, ge=2, description=(
        "A lesson sharing a run of this many words with its case's input or trajectory "
        "is refused; half as many are flagged in the PR body."))
    tool_max_steps: int = Field(default=30, ge=1, description=(
        "Agent turns of a tool-calling rollout."))
    tool_max_user_turns: int = Field(default=10, ge=1, description=(
        "User turns of a tool-calling rollout."))
    calls_per_rollout: Literal[1, 2] | None = Field(default=None, description=(
        'LLM calls per training rollout: 1 analyses it and proposes its edits in one '
        '"reflect" call; 2 makes an "analyze" call, then an "estimate" call (for models '
        'that do better with two smaller tasks). Unset: 1, but 2 for the embedded model, '
        'whose replies are bounded to 1024 tokens.'))
    group_size: int = Field(default=1, ge=1, le=MAX_GROUP_SIZE, description=(
        'Rollouts of each training case against the same snapshot; above 1, one '
        '"group_reflect" call per group learns from the contrast of its better and worse '
        'runs, and a group whose runs all got the same evaluation gets none.'))
    group_temperature: float = Field(default=0.7, ge=0, le=2, description=(
        "The sampling temperature of a group's runs (each also gets its own seed)."))

    def calls_for(self, embedded: bool, group_size: int = 1) -> int:
        """The LLM calls per trained rollout (``calls_per_rollout``, or its default for
        the embedded model or an endpoint); with a ``group_size`` above 1, per trained
        group: one ``group_reflect`` call at most (a group with nothing to contrast gets
        none)."""
        if group_size > 1:
            return 1
        return self.calls_per_rollout or (2 if embedded else 1)


class SessionSettings(SettingsTable):
    """``[sessions]``: the session hub (``expgit sessions``)."""

    branch: BranchName = Field(default="expgit/sessions", description=(
        "The branch that keeps the ingested sessions."))
    window_tokens: int = Field(default=6000, gt=0, description=(
        "The segmentation window, in estimated tokens."))
    memory_threshold: float = Field(default=0.7, ge=0, le=1, description=(
        "A task segment whose overall score reaches this is eligible to train the "
        "experiences."))
    sft_threshold: float = Field(default=0.8, ge=0, le=1, description=(
        "A task segment whose overall score reaches this is eligible for fine-tuning "
        "(`expgit export-sft`)."))
    sft_max_tokens: int = Field(default=32_000, gt=0, description=(
        "Longer fine-tuning examples are left out."))


class OutcomeSettings(SettingsTable):
    """``[outcomes]``: feedback outcomes and typed outcome records (analytics only)."""

    branch: BranchName = Field(default="expgit/outcomes", description=(
        "The branch that keeps the outcome records."))
    reask_window_seconds: float = Field(default=600.0, gt=0, description=(
        "A user turn at most this long after a response is a re-ask of it."))


class LearnSettings(SettingsTable):
    """``[learn]``: the thresholds of ``expgit learn``'s rules; the defaults suit a few
    dozen to a few thousand runs."""

    min_uses: int = Field(default=3, ge=1, description=(
        "An experience is judged for failure correlation once at least this many judged "
        "runs had it in context."))
    failure_margin: float = Field(default=0.25, ge=0, le=1, description=(
        "... and flagged when its runs' failure rate is at least the baseline (all "
        "judged runs) plus this margin, and at least `min_failure_rate`."))
    min_failure_rate: float = Field(default=0.5, ge=0, le=1, description=(
        "The least failure rate of a flagged experience's runs."))
    relevance_threshold: float = Field(default=0.5, ge=0, le=1, description=(
        "A run is covered by an experience it used whose lexical relevance to the run's "
        "task (signature and user turn) reaches this share."))
    duplicate_threshold: float = Field(default=0.8, ge=0, le=1, description=(
        "Two experiences are near-duplicates at this lexical similarity or above."))
    min_outcome_coverage: float = Field(default=0.2, ge=0, le=1, description=(
        "Below this share of runs with an outcome record, a finding says so."))
    seed_min_score: float = Field(default=0.8, ge=0, le=1, description=(
        "A run is well rated enough to seed an experience from this score up (passed, no "
        "negative outcome)."))
    max_evidence: int = Field(default=10, ge=1, description=(
        "Evidence examples kept per finding (and rollouts per seed)."))


class ContextSettings(SettingsTable):
    """``[context]``: what a rollout's system prompt shows of the experiences: the
    always-on ones, then the most relevant to the request (BM25) while they fit in
    ``token_budget`` estimated tokens, at most ``top_k`` of them (None: no count limit).
    The embedded model gets at most ``embedded_token_budget`` of them: a 135M model on a
    CPU reads about 150 prompt tokens a second, and a long context does not help it."""

    token_budget: int = Field(default=4000, gt=0, description=(
        "The estimated tokens of the experiences in a rollout's system prompt."))
    top_k: int | None = Field(default=None, ge=0, description=(
        "The most experiences besides the always-on ones; unset: no count limit."))
    embedded_token_budget: int = Field(default=800, gt=0, description=(
        "The token budget for the embedded model."))

    def budget_for(self, embedded: bool) -> int:
        """The token budget of a rollout's experiences: ``token_budget``, capped at
        ``embedded_token_budget`` for the embedded model."""
        return min(self.token_budget, self.embedded_token_budget) if embedded \
            else self.token_budget


class ServeSettings(SettingsTable):
    """``[serve]``: the HTTP services (``expgit serve``, ``expgit env serve``). The bearer
    token is read from the environment variable ``token_env``, never from the file."""

    token_env: str = Field(default="EXPGIT_TOKEN", description=(
        "The environment variable holding the bearer token."))
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0, description=(
        "A larger request body is refused (413)."))
    max_concurrency: int = Field(default=4, ge=1, description=(
        "Training jobs run at once."))
    max_queue: int = Field(default=256, ge=0, description=(
        "Training jobs waiting besides the running ones; one more is refused (429)."))


class LimitSettings(SettingsTable):
    """``[limits]``: bounds of what enters the repository and the prompts."""

    max_message_chars: int = Field(default=20_000, ge=200, description=(
        "Each message text and tool output of a session or rollout is cut to this many "
        "characters (head and tail kept, a line says how much was removed)."))


class Settings(SettingsTable):
    """All of ``expgit.toml``: its top-level keys, and a model per table."""

    experiences_root: str = Field(default="experiences", description=(
        "The folder of the experiences, relative to the repository's root."))
    layout: Literal["flat", "skills"] = Field(default="flat", description=(
        '"flat": <root>/<name>.md; "skills": <root>/<name>/SKILL.md (Agent Skills '
        'folders).'))
    main_branch: BranchName = Field(default="main", description=(
        "The branch the agents read, where proposals are applied."))
    token_budget: int = Field(default=800, gt=0, description=(
        "Upper bound per experience file, in estimated tokens (about 4 bytes per "
        "token)."))
    lock_wait_seconds: float = Field(default=30.0, ge=0, description=(
        "A writer waits this long for the repository lock held by another, then fails "
        "(exit 4)."))
    lock_stale_seconds: float = Field(default=600.0, gt=0, description=(
        "A lock whose writer is gone, or whose record is older than this, is stale and "
        "removed automatically."))
    llm: LLMSettings = Field(default_factory=LLMSettings)
    train: TrainSettings = Field(default_factory=TrainSettings)
    sessions: SessionSettings = Field(default_factory=SessionSettings)
    outcomes: OutcomeSettings = Field(default_factory=OutcomeSettings)
    learn: LearnSettings = Field(default_factory=LearnSettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    skills: SkillSettings = Field(default_factory=SkillSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)

    @field_validator("experiences_root")
    @classmethod
    def _relative_root(cls, value: str) -> str:
        path = PurePosixPath(value)
        if not value or path.is_absolute() or ".." in path.parts or value in (".", ""):
            raise ValueError("must be a relative folder inside the repository, such as "
                             "'experiences'")
        return str(path)

    @field_validator("main_branch")
    @classmethod
    def _main_branch(cls, value: str) -> str:
        if value.startswith("expgit/"):
            raise ValueError("must not be under expgit/, where expgit keeps its own branches")
        return value

    @model_validator(mode="after")
    def _branches_apart(self) -> Settings:
        """Each branch expgit uses is its own: none is another, or inside another, or
        inside the namespaces of gradients and proposals (where a record would list as a
        proposal)."""
        taken = dict(_RESERVED)
        for key, name in (("main_branch", self.main_branch),
                          ("train.trajectories_branch", self.train.trajectories_branch),
                          ("sessions.branch", self.sessions.branch),
                          ("outcomes.branch", self.outcomes.branch)):
            for what, other in taken.items():
                if _clash(name, other):
                    raise ValueError(f"{key}: {name!r} clashes with {what} ({other!r}): "
                                     "each branch expgit uses must be its own, none "
                                     "inside another")
            taken[key] = name
        return self

    @model_validator(mode="after")
    def _listing_needs_skills(self) -> Settings:
        if self.agent.skills == "listing" and self.layout != "skills":
            raise ValueError('agent.skills: "listing" needs layout = "skills" (a flat '
                             'repository has no skill listing; it keeps "retrieval")')
        return self

    def skill_listing(self) -> bool:
        """Whether the tool-calling agent meets the skills as a listing (``[agent]
        skills``; unset: in the skills layout)."""
        return self.layout == "skills" and (self.agent.skills or "listing") == "listing"

    @property
    def main_ref(self) -> str:
        return f"refs/heads/{self.main_branch}"


def parse_settings(text: str, origin: str = SETTINGS_FILE) -> Settings:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInputError(f"{origin}: not valid TOML ({exc})") from None
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"]
            for e in exc.errors())
        raise InvalidInputError(f"{origin}: {problems}") from None


def render_settings(settings: Settings) -> str:
    return (
        "# expgit settings for this experience repository.\n"
        f'experiences_root = "{settings.experiences_root}"\n'
        + (f'layout = "{settings.layout}"\n' if settings.layout != "flat" else "") +
        f'main_branch = "{settings.main_branch}"\n'
        "# Upper bound per experience file, in estimated tokens (about 4 bytes per token).\n"
        f"token_budget = {settings.token_budget}\n"
    )


def with_top_keys(text: str, values: Mapping[str, str], origin: str = SETTINGS_FILE) -> str:
    """The ``expgit.toml`` ``text`` with top-level string keys set (``layout``,
    ``experiences_root``, ``main_branch``): each one's line rewritten, or added before
    the first table; every other line kept as it is. Raises InvalidInputError when the
    result does not read back with those values (a key written across lines, say)."""
    lines = text.splitlines(keepends=True)
    tables = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("[")),
                  len(lines))
    todo = dict(values)
    for i in range(tables):
        key, eq, _ = lines[i].partition("=")
        if eq and key.strip() in todo:
            lines[i] = f"{key.strip()} = {json.dumps(todo.pop(key.strip()))}\n"
    if tables and not lines[tables - 1].endswith("\n"):
        lines[tables - 1] += "\n"
    lines[tables:tables] = [f"{k} = {json.dumps(v)}\n" for k, v in todo.items()]
    result = "".join(lines)
    settings = parse_settings(result, origin)
    wrong = [k for k, v in values.items() if getattr(settings, k) != v]
    if wrong:
        raise InvalidInputError(f"{origin}: could not set {', '.join(wrong)}; write "
                                "each on one line of its own")
    return result
