"""The budgets of an update plan, and the one ``compress`` call that may restore them.

Per experience (``token_budget``) and for the whole set after the plan (``[train]
total_token_budget``; a plan may keep or shrink a set that is already over): an
over-budget chunk of merged files gets ONE ``compress`` call, whose reply gives a shorter
body (and summary) per file, the rest of each file kept; still over, or a compressed file
invalid or junk (:func:`expgit.train.guards.lesson.check_written`): ExpgitError naming it,
nothing committed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from expgit.errors import ExpgitError, InvalidInputError
from expgit.llm.structured import StructuredLLM
from expgit.store.format.experience import check_experience, estimate_tokens
from expgit.store.format.templates import render_prompt
from expgit.store.repository import ExperienceRepository
from expgit.train.components.llm_fields import EditLimits, compose_experience, fence
from expgit.train.components.llm_outputs import compress_output
from expgit.train.guards.lesson import check_written


@dataclass
class Planned:
    """One file of the plan: its new content (None: deleted) and where it comes from."""

    content: str | None
    gradient_ids: list[str] = field(default_factory=list)
    rationales: list[str] = field(default_factory=list)
    confidence: float = 0.0


def nl(text: str | None) -> str:
    text = text or ""
    return text if text.endswith("\n") else text + "\n"


def total_tokens(state: dict[str, str | None]) -> int:
    return sum(estimate_tokens(t) for t in state.values() if t is not None)


def _over(repo: ExperienceRepository, accepted: dict[str, Planned],
          state: dict[str, str | None]) -> tuple[list[str], int]:
    """(names over the per-experience budget, tokens the set is over by)."""
    budget = repo.settings.token_budget
    over = [n for n, p in accepted.items()
            if p.content is not None and estimate_tokens(p.content) > budget]
    before = total_tokens(state)
    after = total_tokens({**state, **{n: p.content for n, p in accepted.items()}})
    limit = max(repo.settings.train.total_token_budget, before)
    return over, max(0, after - limit)


async def within_budget(repo: ExperienceRepository, llm: StructuredLLM, limits: EditLimits,
                        accepted: dict[str, Planned], state: dict[str, str | None]
                        ) -> list[str]:
    """Compress the over-budget files of ``accepted`` (a chunk's plan, updated in place)
    with one ``compress`` call; return their names ([] when within budget, no call).
    ExpgitError if still over."""
    over, set_over = _over(repo, accepted, state)
    if not over and not set_over:
        return []
    budget = repo.settings.token_budget
    names = over if not set_over else [n for n, p in accepted.items() if p.content]
    files = [{"name": n, "text": nl(accepted[n].content), "limit": budget,
              "fence": fence(accepted[n].content or ""),
              "tokens": estimate_tokens(accepted[n].content or "")} for n in names]
    system, user = render_prompt(
        "compress", repo, files=files, per_file_budget=budget,
        body_chars=limits.body_chars, summary_chars=limits.summary_chars,
        set_over=set_over, total_token_budget=repo.settings.train.total_token_budget)
    out = await llm.generate("compress", system, user, compress_output(limits))
    for item in out.items:
        if item.name in names:
            path = repo.path_of(item.name)
            try:
                check_written(rationale="", rationale_required=False, summary=item.summary,
                              body=item.body, skills=limits.skills)
                content = compose_experience(
                    item.name, accepted[item.name].content, summary=item.summary,
                    tags=[], body=item.body, path=path)
                check_experience(content, path, item.name, sys.maxsize)
            except InvalidInputError as exc:
                raise ExpgitError(f"cannot plan: the compressed {item.name} is invalid: "
                                  f"{exc.message}") from None
            accepted[item.name].content = content
    over, set_over = _over(repo, accepted, state)
    if over or set_over:
        what = [f"{n} (about {estimate_tokens(accepted[n].content or '')} tokens, "
                f"budget {budget})" for n in over]
        if set_over:
            what.append(f"the whole experience set ({set_over} tokens over "
                        f"{repo.settings.train.total_token_budget})")
        raise ExpgitError("cannot plan: over the token budget after compression: "
                          + "; ".join(what), hint="nothing was committed; raise "
                          "token_budget / [train] total_token_budget or prune experiences")
    return names
