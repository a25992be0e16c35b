"""PatchMergePolicyOptimizer: gradients -> one update plan, by LLM patch merge
(docs/design.md, "One batch").

Gradients go in chunks of at most ``[train] gradients_per_chunk``; one ``merge`` call per
chunk sees each gradient as a unified diff with its rationale, confidence and evidence,
the current content of the target files and up to ``max(similar, targets)`` similar files
(fewer when the prompt would not fit ``prompt_tokens``). A later chunk sees the files as
earlier chunks left them. The reply's items are bounded fields (:func:`merge_output`:
name, action, cited gradient ids, rationale, summary, tags, markdown body, confidence);
expgit builds each file, keeping the front matter of an existing one. Every item is
validated; budgets (:mod:`~expgit.train.components.plan_budget`):

* per experience (``token_budget``) and for the whole set after the plan
  (``[train] total_token_budget``; a plan may keep or shrink a set that is already over);
* an over-budget chunk gets ONE ``compress`` call; still over: ExpgitError naming it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence

from expgit.core.domain import (
    PlanItemNotes,
    PlanNotes,
    PolicyPlanItem,
    PolicyUpdatePlan,
    SemanticGradient,
)
from expgit.core.redaction.messages import Redactor
from expgit.errors import InvalidInputError
from expgit.llm.structured import StructuredLLM
from expgit.retrieval.relevance import ExperienceRanker, LexicalRanker
from expgit.retrieval.skill_listing import listing_budget
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format.experience import check_experience
from expgit.store.format.templates import render_prompt
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.changes import unified_diff
from expgit.train.components.llm_fields import (
    EditLimits,
    compose_experience,
    fence,
    fit_prompt,
    name_max,
)
from expgit.train.components.llm_outputs import MergeItem, merge_output
from expgit.train.components.plan_budget import Planned, nl, total_tokens, within_budget
from expgit.train.context import PipelineContext
from expgit.train.guards.edit import Rejected, Rejections, guard_edit
from expgit.train.guards.lesson import headings_shown


class PatchMergePolicyOptimizer:
    """Plans one update from a batch of gradients by LLM patch merge, one ``merge`` call
    per chunk (merge, split, de-duplicate, delete), within the token budgets; writes
    nothing. ``plan.metadata``: ``chunks``, ``rejected_items`` (reasons),
    ``compressed`` (names), ``dropped_gradient_ids`` (cited by no item), token totals.

    ``limits`` bound the replies (the body is further capped to fit the token budget);
    ``similar_experiences``: similar files shown besides the targets (at least);
    ``prompt_tokens``: drop the least similar files until a prompt fits. An item holding
    a secret is refused (:mod:`expgit.train.guards.lesson`); rationales are redacted, and
    keep the copy flags of the gradients they cite. An item whose rationale, summary or
    body is junk is dropped as ``degenerate``, one holding a prompt-injection payload as
    ``injection``, one that changes only the form of its file as ``cosmetic``, one that
    removes half its file's body or more as ``collapse`` (the budget's ``compress`` reply
    may shorten a file: it is not checked for collapse); a chunk whose every item was
    junk counts as a failed ``merge`` call."""

    def __init__(self, repo: ExperienceRepository, llm: StructuredLLM,
                 ranker: ExperienceRanker | None = None, *, limits: EditLimits | None = None,
                 similar_experiences: int = 5, prompt_tokens: int | None = None,
                 redactor: Redactor | None = None) -> None:
        self.repo = repo
        self.redactor = redactor or Redactor()
        self.llm = llm
        self.ranker: ExperienceRanker = ranker or LexicalRanker()
        self.limits = (limits or EditLimits()).for_budget(
            repo.settings.token_budget).for_layout(repo.settings.layout)
        self.similar_experiences = similar_experiences
        self.prompt_tokens = prompt_tokens

    async def plan(self, gradients: Sequence[SemanticGradient], policy_set: Snapshot,
                   context: PipelineContext) -> PolicyUpdatePlan:
        if not gradients:
            return PolicyUpdatePlan()
        labelled = {g.gradient_id or f"local-{i + 1}": g for i, g in enumerate(gradients)}
        state: dict[str, str | None] = {n: e.data.decode("utf-8", "replace")
                                        for n, e in policy_set.entries.items()}
        planned: dict[str, Planned] = {}
        rejected: list[str] = []
        compressed: list[str] = []
        size = self.repo.settings.train.gradients_per_chunk
        ids = list(labelled)
        chunks = [ids[i:i + size] for i in range(0, len(ids), size)]
        start_total = total_tokens(state)
        for chunk in chunks:
            items = await self._merge(chunk, labelled, state, planned, policy_set)
            accepted = self._validate(items, chunk, labelled, state, rejected)
            compressed += await within_budget(self.repo, self.llm, self.limits,
                                              accepted, state)
            for name, item in accepted.items():
                state[name] = item.content
                entry = planned.setdefault(name, Planned(item.content))
                entry.content = item.content
                entry.gradient_ids += [i for i in item.gradient_ids
                                       if i not in entry.gradient_ids]
                entry.rationales.append(item.rationales[0])
                entry.confidence = max(entry.confidence, item.confidence)
        plan = PolicyUpdatePlan(items=_items(planned, policy_set, labelled))
        cited = {i for item in plan.items for i in item.gradient_ids}
        plan.metadata = PlanNotes(chunks=len(chunks), rejected_items=rejected,
                                  compressed=compressed,
                                  dropped_gradient_ids=[i for i in ids if i not in cited],
                                  total_tokens_before=start_total,
                                  total_tokens_after=total_tokens(state))
        return plan

    async def _merge(self, chunk: list[str], labelled: dict[str, SemanticGradient],
                     state: dict[str, str | None], planned: dict[str, Planned],
                     policy_set: Snapshot) -> list[MergeItem]:
        root, settings, limits = self.repo.root, self.repo.settings, self.limits
        views, targets = [], list(dict.fromkeys(labelled[i].target_experience_name
                                                for i in chunk))
        for gid in chunk:
            g = labelled[gid]
            old = g.before.content if g.before else None
            new = g.after.content if g.after else None
            path = f"{root}/{self.repo.layout.file_name(g.target_experience_name)}"
            diff = unified_diff(path, old, new)
            views.append({"id": gid, "target": g.target_experience_name,
                          "operation": "create" if old is None else
                          ("delete" if new is None else "update"),
                          "diff": diff, "fence": fence(diff), "rationale": g.rationale,
                          "confidence": g.confidence, "evidence": g.evidence_trajectory_uris,
                          "stale": old != state.get(g.target_experience_name)})
        limit = max(self.similar_experiences, len(targets))
        query = "\n".join(_query_text(labelled[i]) for i in chunk)
        ranked = await self.ranker.rank(query, policy_set, limit + len(targets))
        similar = [{"name": e.name, "path": e.path, "text": nl(state[e.name]),
                    "fence": fence(state[e.name] or "")}
                   for e in ranked if e.name not in targets and state.get(e.name)][:limit]
        rules = {"root": root, "token_budget": settings.token_budget,
                 "name_max": name_max(limits),
                 "name_words": limits.name_words, "body_chars": limits.body_chars,
                 "summary_chars": limits.summary_chars, "max_tags": limits.max_tags,
                 "max_items": limits.max_items, "allow_delete": limits.allow_delete,
                 "total_token_budget": settings.train.total_token_budget,
                 "total_tokens": total_tokens(state),
                 "listing": listing_budget(policy_set, settings)}
        target_views = [{"name": n, "path": f"{root}/{self.repo.layout.file_name(n)}",
                         "version": e.version if (e := policy_set.get(n)) else 0,
                         "text": nl(state[n]) if state.get(n) is not None else None,
                         "fence": fence(state.get(n) or "")}
                        for n in targets]
        earlier = [{"name": n, "action": "delete" if p.content is None else "upsert",
                    "rationale": " / ".join(p.rationales)} for n, p in planned.items()]
        output = merge_output(limits, max(len(chunk), 1))
        system, user, _ = fit_prompt(
            lambda kept, _: render_prompt("merge", self.repo, gradients=views,
                                          targets=target_views, similar=similar[:kept],
                                          earlier=earlier, rules=rules),
            self.prompt_tokens, output, len(similar))
        return (await self.llm.generate("merge", system, user, output)).items

    def _validate(self, items: list[MergeItem], chunk: list[str],
                  labelled: dict[str, SemanticGradient], state: dict[str, str | None],
                  rejected: list[str]) -> dict[str, Planned]:
        """The valid items of one chunk by name (budgets are checked afterwards)."""
        accepted: dict[str, Planned] = {}
        rejections = Rejections(self.redactor, rejected)
        shown = headings_shown(state.get(labelled[i].target_experience_name) for i in chunk)
        for item in items:
            name = item.name

            def target(path: str, item: MergeItem = item) -> tuple[str | None, str | None]:
                current = state.get(item.name)
                if item.action == "delete":
                    if current is None:
                        raise InvalidInputError("delete of an experience that does not exist")
                    return current, None
                content = compose_experience(item.name, current, summary=item.summary,
                                             tags=item.tags, body=item.body, path=path)
                if content == current:
                    raise InvalidInputError("upsert identical to the current file")
                check_experience(content, path, item.name, sys.maxsize)
                return current, content

            verdict = Rejected("invalid", "a second item for the same experience") \
                if name in accepted else guard_edit(
                    item, target, path_of=self.repo.path_of, sources=[], shown=shown,
                    max_copied_words=self.repo.settings.train.max_copied_words,
                    skills=self.repo.layout.skills, rationale_required=False)
            if isinstance(verdict, Rejected):
                rejections.add(item, verdict)
                continue
            content = verdict.content
            cited = [i for i in dict.fromkeys(item.gradient_ids) if i in chunk]
            if not cited:  # the model forgot to cite: its own target's gradients, or all
                cited = [i for i in chunk if labelled[i].target_experience_name == name] \
                    or list(chunk)
            flags = [m.group(0) for i in cited
                     if (m := _FLAG.search(labelled[i].rationale)) is not None]
            rationale = " ".join([self.redactor.text(item.rationale.strip()),
                                  *dict.fromkeys(flags)])
            accepted[name] = Planned(content, cited, [rationale], item.confidence)
        rejections.count_all_junk(self.llm, "merge", items, "items of a merge chunk")
        return accepted


_FLAG = re.compile(r"\(flagged: [^)]*\)")


def _query_text(g: SemanticGradient) -> str:
    file = g.after or g.before
    return f"{g.target_experience_name}\n{g.rationale}\n{file.content if file else ''}"


def _items(planned: dict[str, Planned], policy_set: Snapshot,
           labelled: dict[str, SemanticGradient]) -> list[PolicyPlanItem]:
    """The plan items: the final state of every name that differs from ``policy_set``."""
    items = []
    for name, p in sorted(planned.items()):
        entry = policy_set.get(name)
        original = entry.data.decode("utf-8", "replace") if entry else None
        if p.content == original:
            continue
        evidence = [u for gid in p.gradient_ids
                    for u in labelled[gid].evidence_trajectory_uris]
        items.append(PolicyPlanItem(
            kind="delete_experience" if p.content is None else "upsert_experience",
            target_experience_name=name, before_content=original, after_content=p.content,
            base_version=entry.version if entry else 0, confidence=p.confidence,
            rationale=" / ".join(r for r in dict.fromkeys(p.rationales) if r),
            evidence_trajectory_uris=list(dict.fromkeys(evidence)),
            gradient_ids=p.gradient_ids,
            metadata=PlanItemNotes(base_blob=entry.blob if entry else None)))
    return items
