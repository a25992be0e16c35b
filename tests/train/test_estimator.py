"""ExperienceGradientEstimator: edits -> gradient commits, invalid edits dropped."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from conftest import fsck, git

from expgit.core.domain import (
    Case,
    Message,
    Rollout,
    RolloutAnalysis,
    Rubric,
    RubricEvaluation,
    Trajectory,
)
from expgit.llm.factory import LOCAL_MAX_TOKENS
from expgit.llm.port import UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM, wire_schema
from expgit.store.derived.snapshot import ExperienceEntry, Snapshot
from expgit.store.format.experience import NAME_MAX, parse_experience
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import find_gradient, list_gradients
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator
from expgit.train.components.llm_fields import (
    CHARS_PER_TOKEN,
    LOCAL_ANALYSIS_LIMITS,
    LOCAL_EDIT_LIMITS,
    LOCAL_REPLY_CHARS,
    NAME_PATTERN,
    EditLimits,
    schema_chars,
    worst_case_chars,
)
from expgit.train.components.llm_outputs import (
    EstimateOutput,
    analyze_output,
    compress_output,
    estimate_output,
    merge_output,
)
from expgit.train.context import PipelineContext
from expgit.train.records.trajectory_store import TrajectoryStore

TRAJECTORY = """---
name: 0123456789abcdef
outcome: failure
---
# Cancelled an ineligible economy booking

## Lessons

- Check the 24-hour rule and insurance before cancelling.
"""

NEW_BODY = """# Confirm the refund amount

When: a cancellation is eligible.

Procedure:
1. State the amount and the method, then ask for an explicit yes.
"""
NEW_FILE = """---
name: confirm-refund-amount
status: active
summary: State the refund amount and method before any cancellation.
tags:
- refunds
metadata: {}
---
""" + NEW_BODY


class FixedRanker:
    """Shows exactly the named experiences (a stand-in for the lexical ranker)."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.queries: list[str] = []

    async def rank(self, query: str, snapshot: Snapshot, k: int) -> list[ExperienceEntry]:
        self.queries.append(query)
        return [snapshot.entries[n] for n in self.names][:k]


def analysis_for(repo: ExperienceRepository) -> RolloutAnalysis:
    uri, _ = TrajectoryStore(repo).store("0123456789abcdef", TRAJECTORY, "trajectory")
    case = Case(name="c", task_signature="airline.cancel", input={}, rubric=Rubric(name="r"))
    rollout = Rollout(case=case, messages=[Message.text("user", "cancel")],
                      policy_snapshot_id="s")
    return RolloutAnalysis(
        rollout=rollout, evaluation=RubricEvaluation(passed=False, score=0.0),
        trajectory=Trajectory(name="0123456789abcdef", uri=uri, content=TRAJECTORY,
                              outcome="failure", retrieval_anchor="cancel eligibility"))


def estimator(repo: ExperienceRepository, edits: list[dict[str, Any]], ranker: Any,
              limits: EditLimits | None = None
              ) -> tuple[ExperienceGradientEstimator, ScriptedChatModel]:
    model = ScriptedChatModel([Step("estimate", json.dumps({"edits": edits}))])
    return ExperienceGradientEstimator(repo, StructuredLLM(model, UsageMeter()), ranker,
                                       limits=limits), model


def edit(name: str, action: str, body: str = "", confidence: float = 0.7, *,
         summary: str = "", tags: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "action": action,
            "rationale": f"{action} {name} because the trajectory failed",
            "summary": summary, "tags": tags or [], "body": body, "confidence": confidence}


def body_of(text: str) -> str:
    return text.split("\n---\n", 1)[1]


def test_valid_edits_become_gradient_commits_with_the_trajectory_as_evidence(
        seeded_repo: ExperienceRepository) -> None:
    main = seeded_repo.main_commit()
    snapshot = seeded_repo.snapshot()
    current = snapshot.entries["cancellation-eligibility-rules"].text
    updated = current + "- Check the 24-hour rule before anything else.\n"
    analysis = analysis_for(seeded_repo)
    ranker = FixedRanker("cancellation-eligibility-rules", "compensation-certificates")
    est, model = estimator(seeded_repo, [
        edit("cancellation-eligibility-rules", "update", body_of(updated), 0.8),
        edit("confirm-refund-amount", "create", f"```markdown\n{NEW_BODY}```", 0.6,
             summary="State the refund amount and method before any cancellation.",
             tags=["Refunds", "refunds", " "]),
        edit("compensation-certificates", "delete", confidence=0.3),
    ], ranker)
    gradients = asyncio.run(est.estimate(analysis, snapshot, PipelineContext()))

    model.assert_done()
    assert len(model.calls) == 1 and model.calls[0][0] == "estimate"
    assert analysis.metadata.rejected_edits == []
    assert [g.target_experience_name for g in gradients] == [
        "cancellation-eligibility-rules", "confirm-refund-amount", "compensation-certificates"]
    uri = analysis.trajectory.uri  # type: ignore[union-attr]
    for g in gradients:
        assert g.gradient_id and g.evidence_trajectory_uris == [uri]
        core = find_gradient(seeded_repo, g.gradient_id)
        assert core.evidence == [uri] and core.parent == main
        assert core.confidence == g.confidence and core.base_version == g.base_version
        assert core.base_blob == g.base_blob
    update, create, delete = gradients
    assert update.before is not None and update.before.content == current
    # the front matter is kept byte for byte: only the body changed
    assert update.after is not None and update.after.content == updated
    assert update.base_blob == snapshot.entries["cancellation-eligibility-rules"].blob
    assert update.base_version == snapshot.entries["cancellation-eligibility-rules"].version
    assert update.confidence == 0.8
    assert create.before is None and create.base_version == 0 and create.base_blob is None
    # built by expgit: front matter from the fields, fence removed, tags cleaned
    assert create.after is not None and create.after.content == NEW_FILE
    assert delete.after is None and delete.before is not None

    path = seeded_repo.git.work_tree
    assert path is not None
    trailers = git(path, "show", "-s", "--format=%(trailers:key=Expgit-Evidence,valueonly)",
                   f"refs/heads/expgit/gradients/{update.gradient_id}")
    assert trailers.strip() == uri
    assert seeded_repo.main_commit() == main
    fsck(path)

    _, messages, response_format = model.calls[0]
    user, system = messages[1]["content"], messages[0]["content"]
    assert TRAJECTORY.strip() in user and current in user
    assert "under 800 tokens" in system and '"body"' in system and "At most 3 edits" in system
    assert "name: <name>" not in system  # the model no longer writes front matter
    assert "cancel eligibility" in ranker.queries[0]
    assert response_format is not None
    # the schema on the wire: the output model's, without its length and count bounds
    assert response_format["json_schema"]["schema"] == \
        wire_schema(estimate_output(EditLimits()))


def test_an_update_of_fields_keeps_the_rest_of_the_front_matter(
        seeded_repo: ExperienceRepository) -> None:
    snapshot = seeded_repo.snapshot()
    entry = snapshot.entries["refund-method-rules"]
    est, _ = estimator(seeded_repo, [edit(
        "refund-method-rules", "update", summary="Refund to the original payment methods.",
        tags=["refunds", "Payment Methods"])], FixedRanker("refund-method-rules"))
    [g] = asyncio.run(est.estimate(analysis_for(seeded_repo), snapshot, PipelineContext()))
    assert g.after is not None
    exp = parse_experience(g.after.content, entry.path)
    before = entry.experience
    assert exp.front_matter.summary == "Refund to the original payment methods."
    assert exp.front_matter.tags == ["refunds", "payment-methods"]
    assert exp.front_matter.metadata == before.front_matter.metadata
    assert exp.front_matter.metadata["owner"] == "support-playbook"
    assert exp.status == before.status and exp.name == before.name
    assert exp.body == before.body  # an empty body keeps the current one


def test_invalid_edits_are_dropped_with_reasons(seeded_repo: ExperienceRepository) -> None:
    main = seeded_repo.main_commit()
    snapshot = seeded_repo.snapshot()
    current = snapshot.entries["cancellation-eligibility-rules"].text
    est, _ = estimator(seeded_repo, [
        edit("confirm-refund-amount", "create", "".join(map(chr, range(0x4E00, 0x5508)))),
        edit("cancellation-eligibility-rules", "update", body_of(current)),
        edit("never-existed", "delete"),
        edit("refund-method-rules", "create", NEW_BODY),
        edit("refund-method-rules", "update", NEW_BODY),
        edit("never-existed", "update", NEW_BODY),
        edit("confirm-refund-amount", "create"),
        edit("confirm-refund-amount", "create", NEW_BODY),  # the one valid edit
        edit("confirm-refund-amount", "create", NEW_BODY.replace("yes", "YES")),
    ], FixedRanker("cancellation-eligibility-rules"), EditLimits(max_edits=9))
    analysis = analysis_for(seeded_repo)
    gradients = asyncio.run(est.estimate(analysis, snapshot, PipelineContext()))

    assert [g.target_experience_name for g in gradients] == ["confirm-refund-amount"]
    assert list_gradients(seeded_repo)[0].id == gradients[0].gradient_id
    reasons = analysis.metadata.rejected_edits or []
    expected = ["over the budget", "identical to main",
                "delete of an experience that does not exist", "already exists", "not shown",
                "update of an experience that does not exist", "needs a body",
                "a second edit of the same experience"]
    assert len(reasons) == len(expected)
    for reason, fragment in zip(reasons, expected, strict=True):
        assert fragment in reason, (reason, fragment)
    assert len(list_gradients(seeded_repo)) == 1
    assert seeded_repo.main_commit() == main


def test_a_create_of_a_shown_file_is_its_update(seeded_repo: ExperienceRepository) -> None:
    snapshot = seeded_repo.snapshot()
    current = snapshot.entries["cancellation-eligibility-rules"].text
    # the current body and one rule more (replacing the body whole would be a collapse)
    body = snapshot.entries["cancellation-eligibility-rules"].experience.body \
        + "- State the amount and the method, then ask for an explicit yes.\n"
    est, _ = estimator(seeded_repo, [edit("cancellation-eligibility-rules", "create",
                                          body)],
                       FixedRanker("cancellation-eligibility-rules"))
    analysis = analysis_for(seeded_repo)
    [g] = asyncio.run(est.estimate(analysis, snapshot, PipelineContext()))
    assert g.metadata.operation == "update" and g.before is not None
    assert g.before.content == current and g.after is not None
    assert g.after.content == current.split("\n---\n", 1)[0] + "\n---\n" + body
    assert analysis.metadata.rejected_edits == []


def test_a_create_with_only_a_summary_gets_a_minimal_body(
        seeded_repo: ExperienceRepository) -> None:
    est, _ = estimator(seeded_repo, [edit("check-the-24-hour-rule", "create",
                                          summary="Check the 24-hour rule first.")],
                       FixedRanker())
    [g] = asyncio.run(est.estimate(analysis_for(seeded_repo), seeded_repo.snapshot(),
                                   PipelineContext()))
    assert g.after is not None
    assert body_of(g.after.content) == "# Check the 24 hour rule\n\nCheck the 24-hour rule first.\n"


def test_a_reply_over_the_schema_bounds_gets_one_repair_round(
        seeded_repo: ExperienceRepository) -> None:
    bad_name = [edit("Bad Name", "create", NEW_BODY)]
    too_many = [edit("a-rule", "create", NEW_BODY), edit("b-rule", "create", NEW_BODY)]
    long_body = [edit("a-rule", "create", "x" * 901)]
    cases = ((bad_name, "edits.0.name: String should match pattern"),
             (too_many, "edits: List should have at most 1 item"),
             (long_body, "edits.0.body: String should have at most 900 characters"))
    for number, (bad, problem) in enumerate(cases):
        good = [edit(f"confirm-refund-amount-{number}", "create", NEW_BODY)]
        model = ScriptedChatModel([Step("estimate", json.dumps({"edits": bad})),
                                   Step("estimate", json.dumps({"edits": good}))])
        est = ExperienceGradientEstimator(seeded_repo, StructuredLLM(model, UsageMeter()),
                                          FixedRanker(), limits=LOCAL_EDIT_LIMITS)
        gradients = asyncio.run(est.estimate(analysis_for(seeded_repo),
                                             seeded_repo.snapshot(), PipelineContext()))
        model.assert_done()
        assert problem in model.calls[1][1][-1]["content"]
        assert [g.target_experience_name for g in gradients] == [good[0]["name"]]


def test_soft_bounds_are_clipped_not_refused(seeded_repo: ExperienceRepository) -> None:
    reply = edit("confirm-refund-amount", "create", NEW_BODY, 7, summary="s" * 500,
                 tags=[f"tag{i}" for i in range(9)])
    reply["rationale"] = "r" * 900
    out = estimate_output(EditLimits()).model_validate({"edits": [reply]})
    [e] = out.edits
    assert len(e.summary) == 200 and e.summary.endswith("…")
    assert len(e.rationale) == 400 and len(e.tags) == 6 and e.confidence == 1.0


def test_the_schema_carries_the_bounds() -> None:
    schema = estimate_output(EditLimits().for_budget(800)).model_json_schema()
    edit_schema = schema["$defs"]["EstimatedEdit"]["properties"]
    assert schema["properties"]["edits"]["maxItems"] == 3
    assert edit_schema["name"] == {"maxLength": NAME_MAX, "pattern": NAME_PATTERN,
                                   "type": "string"}
    assert edit_schema["body"]["maxLength"] == 1800
    assert edit_schema["summary"]["maxLength"] == 200
    assert edit_schema["rationale"] == {"maxLength": 400, "minLength": 1, "type": "string"}
    assert edit_schema["tags"] == {"items": {"maxLength": 32, "type": "string"},
                                   "maxItems": 6, "type": "array"}
    assert edit_schema["confidence"] == {"maximum": 1, "minimum": 0, "type": "number"}
    assert edit_schema["action"]["enum"] == ["create", "update", "delete"]
    assert "title" not in edit_schema["body"]  # no per-field titles for a model to copy
    assert schema["title"] == EstimateOutput.__name__ == "EstimateOutput"
    # the body shrinks to fit a small token budget; the local profile is smaller still
    small = estimate_output(EditLimits().for_budget(300)).model_json_schema()
    assert small["$defs"]["EstimatedEdit"]["properties"]["body"]["maxLength"] == 600
    local = estimate_output(LOCAL_EDIT_LIMITS.for_budget(800)).model_json_schema()
    local_edit = local["$defs"]["EstimatedEdit"]["properties"]
    assert local["properties"]["edits"]["maxItems"] == 1
    assert local_edit["body"]["maxLength"] == 900
    assert local_edit["action"]["enum"] == ["create", "update"]  # no delete
    assert local_edit["name"]["pattern"] == LOCAL_EDIT_LIMITS.name_pattern
    # the slug pattern accepts exactly the valid names (up to 12 words of 40 characters)
    pattern = re.compile(NAME_PATTERN)
    for name in ("a", "refund-method-rules", "verify-identity-before-account-changes"):
        assert pattern.match(name)
    for name in ("Bad", "a--b", "-a", "a-", "a_b", "a-b-c-d-e-f-g-h-i-j-k-l-m",
                 "x" * 41):
        assert not pattern.match(name)
    assert re.match(LOCAL_EDIT_LIMITS.name_pattern, "a-b-c-d-e-f")
    assert not re.match(LOCAL_EDIT_LIMITS.name_pattern, "a-b-c-d-e-f-g")


def test_a_local_reply_that_fills_every_bound_fits_the_local_reply_cap() -> None:
    """At one token per character (a degenerate reply of digits), the longest reply the
    local schemas allow still fits the embedded model's 2048 tokens."""
    local = LOCAL_EDIT_LIMITS.for_budget(800)
    for model in (estimate_output(local), merge_output(local, 64), compress_output(local),
                  analyze_output(LOCAL_ANALYSIS_LIMITS)):
        size = worst_case_chars(model.model_json_schema())
        assert 1000 < size <= LOCAL_REPLY_CHARS < LOCAL_MAX_TOKENS, model.__name__
    # a reply that fills every field (the longest number llama.cpp's grammar allows)
    number = "-" + "9" * 16 + "." + "9" * 16 + "e-" + "9" * 16
    filled = {"name": "-".join(["w" * 20] * 6), "action": "update", "rationale": "r" * 240,
              "summary": "s" * 160, "tags": ["t" * 24] * 4, "body": "b" * 900}
    text = json.dumps({"edits": [filled]}, separators=(",", ":"))[:-3] + \
        f',"confidence":{number}}}]}}'
    assert json.loads(text)["edits"][0]["body"] == "b" * 900
    bound = worst_case_chars(estimate_output(local).model_json_schema())
    assert bound - 60 < len(text) <= bound  # spaces the grammar allows make up the rest
    assert worst_case_chars(estimate_output(EditLimits()).model_json_schema()) > 8000


def test_no_trajectory_means_no_call(seeded_repo: ExperienceRepository) -> None:
    analysis = analysis_for(seeded_repo)
    analysis.trajectory = None
    model = ScriptedChatModel([])
    est = ExperienceGradientEstimator(seeded_repo, StructuredLLM(model, UsageMeter()),
                                      FixedRanker())
    assert asyncio.run(est.estimate(analysis, seeded_repo.snapshot(), PipelineContext())) == []
    assert model.calls == []


def without_floor(repo: ExperienceRepository, floor: float = 0.0) -> ExperienceRepository:
    """``repo`` with ``[train] relevance_floor = floor`` (0: every ranked file shown)."""
    train = repo.settings.train.model_copy(update={"relevance_floor": floor})
    repo.settings = repo.settings.model_copy(update={"train": train})
    return repo


def shown_in(seeded_repo: ExperienceRepository) -> list[str]:
    model = ScriptedChatModel([Step("estimate", json.dumps({"edits": []}))])
    est = ExperienceGradientEstimator(seeded_repo, StructuredLLM(model, UsageMeter()))
    gradients = asyncio.run(est.estimate(analysis_for(seeded_repo), seeded_repo.snapshot(),
                                         PipelineContext()))
    assert gradients == []
    user = model.calls[0][1][1]["content"]
    return re.findall(r"^### (\S+)", user, re.M)


def test_the_default_lexical_ranker_shows_relevant_files(
        seeded_repo: ExperienceRepository) -> None:
    """The best match first; files under ``relevance_floor`` of its score are left out,
    and all ``relevant_experiences`` are shown with a floor of 0."""
    shown = shown_in(seeded_repo)
    assert shown[0] == "cancellation-eligibility-rules"
    everything = shown_in(without_floor(seeded_repo))
    assert len(everything) == seeded_repo.settings.train.relevant_experiences
    assert 1 <= len(shown) < len(everything) and everything[:len(shown)] == shown
    assert shown_in(without_floor(seeded_repo, 1.0)) == shown[:1]


def test_fewer_experiences_when_asked_or_when_the_prompt_would_not_fit(
        seeded_repo: ExperienceRepository) -> None:
    def run(**options: Any) -> str:
        model = ScriptedChatModel([Step("estimate", json.dumps({"edits": []}))])
        est = ExperienceGradientEstimator(seeded_repo, StructuredLLM(model, UsageMeter()),
                                          **options)
        asyncio.run(est.estimate(analysis_for(seeded_repo), seeded_repo.snapshot(),
                                 PipelineContext()))
        system, user = (m["content"] for m in model.calls[0][1])
        prompt: str = system + user
        return prompt

    without_floor(seeded_repo)
    two = run(relevant_experiences=2)
    assert two.count("\n### ") == 2
    # a budget just below that prompt (with its schema): the least relevant one goes
    budget = (len(two) + schema_chars(estimate_output(EditLimits()))) // CHARS_PER_TOKEN - 1
    one = run(relevant_experiences=2, prompt_tokens=budget)
    assert one.count("\n### ") == 1
    assert one.split("\n### ")[1].split("\n")[0] == two.split("\n### ")[1].split("\n")[0]
    assert run(relevant_experiences=0).count("\n### ") == 0
