"""Shared by the training service tests: four recorded rollouts on four topics, the strict
script that trains them (one analysis and one estimate each, one merge of all four), a
model that can be held, and a real service on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from conftest import git

from expgit.asgi.server import RunningServer, start_server
from expgit.core.domain import (
    Case,
    Message,
    Rollout,
    Rubric,
    RubricCriterion,
    RubricEvaluation,
    TextPart,
    ToolPart,
)
from expgit.llm.port import ChatMessages, Completion, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.service.training_app import ServiceLimits, create_training_app
from expgit.service.training_wiring import streaming_trainer_factory

TOKEN = "s3cret-token"
TOPICS = ("zebra", "yak", "quokka", "narwhal")


def topic_case(topic: str) -> Case:
    return Case(name=f"{topic}-case", task_signature=f"{topic}-care",
                input={"user_query": f"How do I feed a {topic}?"},
                rubric=Rubric(name=topic, criteria=[RubricCriterion(name="answers")]))


def topic_rollout(topic: str) -> Rollout:
    """A failed rollout with a tool call (a ToolPart) and the environment's evaluation."""
    return Rollout(
        case=topic_case(topic), policy_snapshot_id="recorded-elsewhere",
        messages=[Message.text("user", f"How do I feed a {topic}?"),
                  Message(role="assistant", parts=[
                      TextPart(text="Let me look that up."),
                      ToolPart(tool_id="t1", tool_name="lookup_diet",
                               tool_input={"animal": topic}, tool_output="no record")]),
                  Message.text("assistant", "Sorry, I do not know.")],
        evaluation=RubricEvaluation(passed=False, score=0.0,
                                    feedback=[f"did not answer about the {topic}"]))


def _topic_in(text: str) -> str:
    found = [t for t in TOPICS if t in text]
    assert len(found) == 1, f"expected one topic in the prompt, found {found}"
    return found[0]


def _edit(topic: str, **extra: object) -> dict[str, object]:
    return {"name": f"{topic}-feeding", **extra, "rationale": f"learned about {topic}s",
            "summary": f"How to answer questions about feeding a {topic}.",
            "tags": ["animals"],
            "body": f"# Feeding a {topic}\n\nLook the diet up before answering.\n",
            "confidence": 0.7}


def analyze(messages: ChatMessages) -> str:
    topic = _topic_in(messages[-1]["content"])
    return json.dumps({"title": f"Lesson about {topic} feeding", "outcome": "failure",
                       "summary": f"The agent could not say how to feed a {topic}.",
                       "key_steps": ["called lookup_diet"], "mistakes": ["gave up"],
                       "lessons": [f"know {topic} diets"],
                       "retrieval_anchor": f"{topic} feeding"})


def estimate(messages: ChatMessages) -> str:
    topic = _topic_in(messages[-1]["content"])
    return json.dumps({"edits": [_edit(topic, action="create")]})


def merge(messages: ChatMessages) -> str:
    """Upsert every topic whose gradient the prompt shows."""
    text = messages[-1]["content"]
    return json.dumps({"items": [_edit(t, action="upsert", gradient_ids=[])
                                 for t in TOPICS if f"experiences/{t}-feeding.md" in text]})


def reflect(messages: ChatMessages) -> str:
    """The analyst's and the estimator's replies in one (the one-call reflection)."""
    return json.dumps({**json.loads(analyze(messages)), **json.loads(estimate(messages))})


def training_script(topics: tuple[str, ...] = TOPICS) -> ScriptedChatModel:
    steps = [Step("reflect", reflect) for _ in topics]
    return ScriptedChatModel([*steps, Step("merge", merge)])


class HeldChat:
    """A chat model that waits (without blocking the loop) until ``release`` is set;
    ``waiting`` is set once a call is held."""

    def __init__(self, inner: ScriptedChatModel) -> None:
        self.inner = inner
        self.model = inner.model
        self.release = threading.Event()
        self.waiting = threading.Event()

    async def complete(self, messages: ChatMessages, **kw: Any) -> Completion:
        self.waiting.set()
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        return await self.inner.complete(messages, **kw)


@dataclass
class Handles:
    structured: StructuredLLM
    embeddings: None = None
    meter: UsageMeter = field(default_factory=UsageMeter)
    is_local: bool = False
    prompt_tokens: int | None = None
    description: str = ""


def handles(chat: ScriptedChatModel | HeldChat) -> Handles:
    meter = UsageMeter()
    return Handles(StructuredLLM(chat, meter), meter=meter)


def start_service(path: Path, llm: Handles, *, mode: str = "propose",
                  token: str | None = TOKEN, batch: int = 4, **limits: Any
                  ) -> RunningServer:
    limits.setdefault("shutdown_grace_seconds", 5.0)
    app = create_training_app(
        path, llm, mode=mode, token=token,  # type: ignore[arg-type]
        limits=ServiceLimits(**limits),
        trainer_factory=streaming_trainer_factory(max_gradients_per_update=batch,
                                                  max_wait_seconds=60))
    return start_server(app)


JSON = {"Content-Type": "application/json"}  # the services take JSON bodies only


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def wait_finished(url: str, job_id: str, *, limit_seconds: float = 60) -> dict[str, Any]:
    """Poll a job until it is completed or failed (fails the test after the limit)."""
    deadline = time.monotonic() + limit_seconds
    while True:
        answer = httpx.get(f"{url}/v1/train/jobs/{job_id}", headers=auth())
        assert answer.status_code == 200, answer.text
        job: dict[str, Any] = answer.json()
        if job["status"] in ("completed", "failed"):
            return job
        assert time.monotonic() < deadline, f"job {job_id} never finished: {job}"
        time.sleep(0.05)


def all_refs(path: Path) -> str:
    return git(path, "for-each-ref", "--format=%(refname) %(objectname)")
