"""``experience_seed_pack.json``: candidate experiences drawn from well-rated runs.

One seed per task signature that has well-rated runs (passed, or judged positive by an
outcome, with a score of at least ``seed_min_score`` and no negative outcome). The seed
is built from its best run (highest score, then lowest id), with no LLM: the task as the
user put it, the tools the run called, the reply that was rated well, and the rubric's
required checks. Its file is a **draft** experience (``status: draft``, tag ``seed``):
proposed, reviewed and applied, it still reaches the agent only once someone makes it
active. Deterministic: the same runs and snapshot give the same pack.
"""

from __future__ import annotations

import hashlib
import re

from pydantic import BaseModel, ConfigDict

from expgit.core.redaction.text import redact_text
from expgit.errors import InvalidInputError
from expgit.learn.lexical import LexicalIndex
from expgit.learn.runs import Run, RunSet
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format.experience import check_experience, new_experience
from expgit.store.format.settings import LearnSettings
from expgit.store.repository import ExperienceRepository

SCHEMA = "expgit.learn.seed_pack/1"
_WORD = re.compile(r"[a-z0-9]+")


class Seed(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    task_signature: str
    summary: str
    tags: list[str]
    content: str  # the whole experience file: front matter (status draft) and body
    best_rollout: str
    best_score: float
    well_rated_rollouts: int
    source_rollouts: list[str]  # at most max_evidence, best first
    covered_by: str | None  # an experience on main already relevant enough to the task
    exists_on_main: bool  # the name (even with the -seed suffix) is taken on main


def slug(text: str) -> str:
    """An experience name for ``text``: its lowercase words joined by hyphens (at most 8
    words, 60 characters), or ``task-<hash>`` when it has no word."""
    words = _WORD.findall(text.lower())[:8]
    name = "-".join(words)[:60].strip("-")
    return name or "task-" + hashlib.sha256(text.encode()).hexdigest()[:8]


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 3].rstrip() + "..."


def _lead(text: str, limit: int = 160) -> str:
    """The answer's first sentences: at least 60 characters' worth, at most ``limit``."""
    sentences = re.findall(r"[^.!?]+[.!?]*", " ".join(text.split()))
    lead = ""
    for sentence in sentences:
        if lead and (len(lead) >= 60 or len(lead) + len(sentence) > limit):
            break
        lead += sentence
    return _clip(lead.strip(), limit)


def _topic_words(signature: str) -> list[str]:
    return [w for w in _WORD.findall(signature.lower()) if len(w) >= 3][:2]


def _body(run: Run, title: str, answer_chars: int) -> str:
    lines = [f"# {title}", "",
             f'When: the user asks something like "{_clip(run.query, 300)}"', "",
             "Procedure:"]
    step = 1
    if run.tools:
        calls = ", then ".join(f"`{t}`" for t in dict.fromkeys(run.tools))
        lines.append(f"{step}. Call {calls}.")
        step += 1
    lines.append(f"{step}. Answer as this well-rated reply did (rollout {run.id}"
                 + (f", score {run.score:.2f}" if run.score is not None else "") + "):")
    lines += ["", *(f"   > {line}" if line else "   >"
                    for line in _clip(run.answer, answer_chars).splitlines() or [""])]
    checks = [c.description or c.name for c in run.rollout.case.rubric.criteria
              if c.required][:5]
    if checks:
        lines += ["", "Checks:", *(f"- {_clip(c, 160)}" for c in checks)]
    return "\n".join(lines) + "\n"


def _seed_file(repo: ExperienceRepository, name: str, run: Run, summary: str,
               tags: list[str], sources: list[str]) -> str:
    title = " ".join(_WORD.findall(run.signature.lower())).capitalize()
    path = repo.path_of(name)
    for answer_chars in (900, 450, 200, 80):
        exp = new_experience(name, _body(run, title or name, answer_chars), status="draft",
                             summary=summary, tags=tags)
        exp = exp.with_fields(metadata={"source": "expgit learn",
                                        "task_signature": run.signature,
                                        "rollouts": sources[:3]})
        text = redact_text(exp.render())[0]  # a rollout's answer may quote a secret
        try:
            check_experience(text, path, name, repo.settings.token_budget)
        except InvalidInputError:
            continue
        return text
    raise InvalidInputError(f"seed {name}: no version of it fits the token budget")


def build_seeds(repo: ExperienceRepository, data: RunSet, snapshot: Snapshot,
                index: LexicalIndex, options: LearnSettings) -> list[Seed]:
    """The seed pack's seeds, by task signature."""
    groups: dict[str, list[Run]] = {}
    for run in data.runs:
        if run.well_rated and run.rating >= options.seed_min_score and run.answer.strip():
            groups.setdefault(run.signature, []).append(run)
    seeds = []
    for signature, runs in sorted(groups.items()):
        ranked = sorted(runs, key=lambda r: (-r.rating, r.id))
        best = ranked[0]
        name = slug(signature)
        if name in snapshot:
            name = f"{name[:55]}-seed"
        sources = [r.id for r in ranked[:options.max_evidence]]
        relevance, covering = index.best(f"{signature}\n{best.query}")
        summary = _clip(f"For {signature} requests: {_lead(best.answer)}", 200)
        tags = list(dict.fromkeys(["seed", *_topic_words(signature)]))
        seeds.append(Seed(
            name=name, task_signature=signature, summary=summary, tags=tags,
            content=_seed_file(repo, name, best, summary, tags, sources),
            best_rollout=best.id,
            best_score=round(best.rating, 4), well_rated_rollouts=len(runs),
            source_rollouts=sources,
            covered_by=covering if relevance >= options.relevance_threshold else None,
            exists_on_main=name in snapshot))
    return seeds
