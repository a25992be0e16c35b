"""The real components with a strict scripted LLM: two cases (baggage, pets), the replies
of each stage, and the script of one training batch. Shared by the pipeline, CLI,
sessions, statistics and environment-service tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from expgit.core.checks import ContainsCheck
from expgit.core.domain import Case, Rubric, RubricCriterion
from expgit.llm.port import EmbeddingModel
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.store.repository import ExperienceRepository


@dataclass
class Handles:
    structured: StructuredLLM
    embeddings: EmbeddingModel | None = None
    is_local: bool = False
    prompt_tokens: int | None = None
    description: str = ""


BAGGAGE_CASE = Case(
    name="baggage-gold-economy", task_signature="checked-baggage",
    input={"user_query": "I am a gold member flying economy. How many checked bags are "
                         "free, and what does a fourth checked bag cost?"},
    rubric=Rubric(name="baggage", criteria=[RubricCriterion(
        name="three-free", check=ContainsCheck(value="3 free"))]))
PETS_CASE = Case(
    name="pet-in-cabin", task_signature="pets",
    input={"user_query": "Can I bring my cat in the cabin?"},
    rubric=Rubric(name="pets", criteria=[RubricCriterion(
        name="answers", check=ContainsCheck(value="cat"))]))

PETS_SUMMARY = "Pets are a policy question; answer from the rules, never promise a booking."
PETS_BODY = ("# Pets in the cabin\n\nWhen: the user asks about travelling with a pet. Say "
             "what the rules allow.\n")
GOLD_RULE = "- A gold member in economy has 3 free checked bags.\n"


def lesson_bodies(repo: ExperienceRepository) -> dict[str, str]:
    """The bodies the scripted estimator and merger write: baggage gets one more rule,
    pets-in-cabin is new."""
    baggage = repo.snapshot().get("checked-baggage-allowance")
    assert baggage is not None
    return {"checked-baggage-allowance": baggage.experience.body + GOLD_RULE,
            "pets-in-cabin": PETS_BODY}


def edit_reply(name: str, action: str, body: str, **extra: object) -> dict[str, object]:
    """One estimate edit (or, with ``gradient_ids``, one merge item) in the reply format:
    the fields, never a whole file; empty summary and tags keep the current ones."""
    return {"name": name, "action": action, **extra, "rationale": f"learned about {name}",
            "summary": PETS_SUMMARY if name == "pets-in-cabin" else "",
            "tags": ["pets"] if name == "pets-in-cabin" else [], "body": body,
            "confidence": 0.7}


SKILLS_REPLY = '"description", "tags", "body"'  # the reply fields a skills-layout prompt names


def in_prompt_layout(messages: list[dict[str, str]], reply: dict[str, object]
                     ) -> dict[str, object]:
    """``reply`` (with ``edits`` or ``items`` in the flat reply format) as the prompt in
    ``messages`` asks for it: a skills-layout prompt names the field ``description``."""
    if not any(SKILLS_REPLY in str(m.get("content", "")) for m in messages):
        return reply
    return {k: [skill_reply(e) for e in v] if k in ("edits", "items") and isinstance(v, list)
            else v for k, v in reply.items()}


def layout_reply(reply: dict[str, object]) -> Callable[[list[dict[str, str]]], str]:
    """A scripted reply that speaks the layout of the prompt it answers."""
    return lambda messages: json.dumps(in_prompt_layout(messages, reply))


def skill_reply(edit: dict[str, object], description: object = None) -> dict[str, object]:
    """An edit (or merge item) of the flat reply format as the skills layout's replies
    write it: its summary is named ``description`` (``description`` replaces it)."""
    return {**{k: v for k, v in edit.items() if k != "summary"},
            "description": edit["summary"] if description is None else description}


def estimate_for(bodies: dict[str, str]) -> Callable[[list[dict[str, str]]], str]:
    """The scripted estimator: the edit the trajectory in the prompt calls for."""
    def estimate(messages: list[dict[str, str]]) -> str:
        name = ("pets-in-cabin" if "pets in cabin" in messages[-1]["content"]
                else "checked-baggage-allowance")
        action = "create" if name == "pets-in-cabin" else "update"
        return json.dumps({"edits": [edit_reply(name, action, bodies[name])]})
    return estimate


def merge_of(bodies: dict[str, str]) -> str:
    """A merge reply upserting every file of ``bodies`` (the optimizer cites the chunk's
    gradients of each target itself when the model cites none)."""
    return json.dumps({"items": [edit_reply(n, "upsert", b, gradient_ids=[])
                                 for n, b in bodies.items()]})


def analyze(messages: list[dict[str, str]]) -> str:
    """The scripted analyst: a lesson anchored on the rollout's topic."""
    anchor = ("pets in cabin" if "my cat" in messages[-1]["content"]
              else "checked baggage allowance gold economy")
    return json.dumps({"title": f"Lesson about {anchor}", "outcome": "failure",
                       "summary": f"The agent got {anchor} wrong.",
                       "key_steps": ["read the question"], "mistakes": ["guessed"],
                       "lessons": [f"look up {anchor}"], "retrieval_anchor": anchor})


def reflect_for(bodies: dict[str, str]) -> Callable[[list[dict[str, str]]], str]:
    """The scripted one-call reflection: the analyst's trajectory and the estimator's
    edit for the rollout in the prompt, in one reply."""
    def reflect(messages: list[dict[str, str]]) -> str:
        pets = "my cat" in messages[-1]["content"]
        name = "pets-in-cabin" if pets else "checked-baggage-allowance"
        action = "create" if pets else "update"
        return json.dumps({**json.loads(analyze(messages)),
                           "edits": [edit_reply(name, action, bodies[name])]})
    return reflect


Reply = Callable[[list[dict[str, str]]], str]


def combined(analyst: Reply, estimator: Reply) -> Reply:
    """A scripted reflection from a scripted analyst and estimator: both replies on the
    reflect prompt, in one object."""
    def reflect(messages: list[dict[str, str]]) -> str:
        return json.dumps({**json.loads(analyst(messages)), **json.loads(estimator(messages))})
    return reflect


def reflect_with(*edits: dict[str, object]) -> Callable[[list[dict[str, str]]], str]:
    """A scripted reflection with the analyst's trajectory and these ``edits``."""
    def reflect(messages: list[dict[str, str]]) -> str:
        return json.dumps({**json.loads(analyze(messages)), "edits": list(edits)})
    return reflect


def layout_reflect(*edits: dict[str, object]) -> Callable[[list[dict[str, str]]], str]:
    """:func:`reflect_with` whose ``edits`` (in the flat reply format) speak the layout
    of the prompt they answer (:func:`in_prompt_layout`)."""
    def reflect(messages: list[dict[str, str]]) -> str:
        return json.dumps(in_prompt_layout(
            messages, {**json.loads(analyze(messages)), "edits": list(edits)}))
    return reflect


def agent(messages: list[dict[str, str]]) -> str:
    """The scripted agent: right about baggage, clueless about pets."""
    if "gold member" in messages[-1]["content"]:
        return "Gold economy: 3 free checked bags; a 4th costs 50 USD."
    return "Sorry, I do not know."


def script(repo: ExperienceRepository, *, eval_cases: int = 0) -> ScriptedChatModel:
    bodies = lesson_bodies(repo)
    steps = [Step("rollout", agent), Step("rollout", agent),
             Step("reflect", reflect_for(bodies)), Step("reflect", reflect_for(bodies)),
             Step("merge", merge_of(bodies))]
    # the baseline eval's rollouts; the final eval of the unchanged main reuses them
    steps += [Step("rollout", agent) for _ in range(eval_cases)]
    return ScriptedChatModel(steps)
