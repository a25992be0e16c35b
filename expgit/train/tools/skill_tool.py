"""The ``Skill`` tool: how an agent in listing mode loads a skill, as Claude Code does.

:class:`SkillToolEnvironment` wraps a rollout's :class:`ToolEnvironment` and adds one
built-in tool, ``Skill`` (an OpenAI function tool with one argument, ``skill``: the
name of a skill). Its result is that skill's SKILL.md body (the version of the rollout's
snapshot); a name that is not an active skill of the snapshot is a :class:`ToolError`,
which the agent sees as the call's error result, and the rollout goes on. ``loaded``
keeps the names loaded, each once, in the order of their first load. The environment's
own tools are passed through; a tool of its own named ``Skill`` is shadowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from expgit.train.tools.environment import (
    State,
    Tool,
    ToolEnvironment,
    ToolError,
    close_environment,
)

SKILL_TOOL = "Skill"
_NAMES_SHOWN = 20


class SkillArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    skill: str = Field(description="The skill's name, as <available_skills> lists it.")


def _unused(state: State, args: Any) -> Any:  # the schema's Tool; execute is ours
    raise ToolError("not callable directly")


SKILL_SCHEMA_TOOL = Tool(
    SKILL_TOOL, "Load a skill: returns its instructions (the body of its SKILL.md). Call "
    "it with the name of a skill from <available_skills> when the task matches the "
    "skill's description, before you act.", SkillArguments, _unused)


def skill_result(name: str, location: str, body: str) -> str:
    """What a ``Skill`` call returns: where the skill lives, then its body."""
    return f"Skill {name} ({location}):\n\n{body.strip()}\n"


class SkillToolEnvironment:
    """``inner``'s tools plus ``Skill`` over ``skills`` (name -> (location, body))."""

    def __init__(self, inner: ToolEnvironment, skills: Mapping[str, tuple[str, str]]) -> None:
        self.inner = inner
        self.skills = dict(skills)
        self.loaded: list[str] = []

    def tool_schemas(self) -> list[dict[str, Any]]:
        own = [s for s in self.inner.tool_schemas()
               if s.get("function", {}).get("name") != SKILL_TOOL]
        return [*own, SKILL_SCHEMA_TOOL.schema()]

    def execute(self, name: str, arguments: dict[str, Any]) -> str:
        if name != SKILL_TOOL:
            return self.inner.execute(name, arguments)
        try:
            skill = SkillArguments.model_validate(arguments).skill
        except ValidationError:
            raise ToolError("invalid arguments for Skill: give {\"skill\": NAME}") from None
        found = self.skills.get(skill)
        if found is None:
            names = sorted(self.skills)
            more = f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
            raise ToolError(f"unknown skill {skill[:80]!r}; the skills are "
                            f"{', '.join(names[:_NAMES_SHOWN]) or '(none)'}{more}")
        if skill not in self.loaded:
            self.loaded.append(skill)
        return skill_result(skill, *found)

    def final_state(self) -> State:
        return self.inner.final_state()

    def close(self) -> None:
        close_environment(self.inner)
