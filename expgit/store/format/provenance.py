"""Which models made and measured a piece of work: the agent model (the rollouts), the
trainer model (analysis, edits, merge), the endpoint's host and, for the embedded model,
its GGUF file's sha256. Gradient and proposal commits carry it as trailers, the run
report as ``provenance``; lessons learned on one model transfer poorly to another, so a
reviewer sees which one this is, and ``eval`` warns when it measures another.

The endpoint is a scheme-less ``host[:port]`` (never a key, a user, a password or a
path), ``embedded`` for the model expgit starts itself, ``in-process`` for a test's."""

from __future__ import annotations

from pydantic import BaseModel, field_validator

from expgit.core.redaction.text import redact_text
from expgit.store.format import trailers as tr

AGENT_MODEL = "Expgit-Agent-Model"
TRAINER_MODEL = "Expgit-Trainer-Model"
ENDPOINT = "Expgit-Endpoint"
MODEL_SHA256 = "Expgit-Model-Sha256"
MAX_CHARS = 120
UNKNOWN = "unknown"


def clean(value: str) -> str:
    """One line of at most MAX_CHARS characters, redacted: a model name is configuration,
    and configuration can hold anything."""
    text = " ".join(redact_text(value)[0].split())[:MAX_CHARS]
    return text or UNKNOWN


class Provenance(BaseModel):
    agent_model: str
    trainer_model: str
    endpoint: str
    model_sha256: str | None = None  # the embedded model's GGUF file

    @field_validator("agent_model", "trainer_model", "endpoint")
    @classmethod
    def _clean(cls, value: str) -> str:
        return clean(value)

    def trailers(self) -> tuple[tuple[str, str], ...]:
        found = [(AGENT_MODEL, self.agent_model), (TRAINER_MODEL, self.trainer_model),
                 (ENDPOINT, self.endpoint)]
        if self.model_sha256:
            found.append((MODEL_SHA256, self.model_sha256))
        return tuple(found)

    def line(self) -> str:
        """``agent X, trainer Y at HOST`` (and the file's hash), for a summary."""
        sha = f" (GGUF sha256 {self.model_sha256[:12]})" if self.model_sha256 else ""
        return f"agent {self.agent_model}, trainer {self.trainer_model} at {self.endpoint}{sha}"


def of_message(message: tr.Message) -> Provenance | None:
    """The provenance a commit's trailers name; None for a commit made before them (or by
    hand: ``expgit propose``)."""
    agent = message.value(AGENT_MODEL)
    if agent is None:
        return None
    return Provenance(agent_model=agent, trainer_model=message.value(TRAINER_MODEL) or UNKNOWN,
                      endpoint=message.value(ENDPOINT) or UNKNOWN,
                      model_sha256=message.value(MODEL_SHA256))
