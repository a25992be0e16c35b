"""PatchMergePolicyOptimizer: chunked LLM patch merge within token budgets."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from conftest import repo_state

from expgit.errors import ExpgitError
from expgit.experience import estimate_tokens
from expgit.llm.port import ChatMessages, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.repository import ExperienceRepository
from expgit.snapshot import Snapshot
from expgit.train.components.policy_optimizer import PatchMergePolicyOptimizer
from expgit.train.context import PipelineContext
from expgit.train.domain import ExperienceFile, PolicyUpdatePlan, SemanticGradient

URI = "expgit/trajectories:trajectories/00000000000000{:02d}.md"


def exp(name: str, body: str, summary: str = "A rule.") -> str:
    return (f"---\nname: {name}\nstatus: active\nsummary: {summary}\ntags: [test]\n"
            f"metadata: {{}}\n---\n# {name}\n\n{body}\n")


def gradient(n: int, name: str, snapshot: Snapshot, after: str | None,
             before: str | None = None, confidence: float = 0.7) -> SemanticGradient:
    entry = snapshot.get(name)
    old = before if before is not None else (entry.text if entry else None)
    return SemanticGradient(
        target_experience_name=name,
        before=ExperienceFile(name=name, content=old) if old is not None else None,
        after=ExperienceFile(name=name, content=after) if after is not None else None,
        base_version=entry.version if entry else 0, base_blob=entry.blob if entry else None,
        rationale=f"rationale {n} for {name}", evidence_trajectory_uris=[URI.format(n)],
        confidence=confidence, gradient_id=f"{n:012x}")


def item(name: str, action: str, content: str | None, ids: list[str],
         confidence: float = 0.8) -> dict[str, Any]:
    return {"name": name, "action": action, "content": content, "rationale": f"{action} {name}",
            "gradient_ids": ids, "confidence": confidence}


def reply(*items: dict[str, Any]) -> str:
    return json.dumps({"items": list(items)})


def optimizer(repo: ExperienceRepository, *steps: Step
              ) -> tuple[PatchMergePolicyOptimizer, ScriptedChatModel]:
    model = ScriptedChatModel(list(steps))
    return PatchMergePolicyOptimizer(repo, StructuredLLM(model, UsageMeter())), model


def plan(opt: PatchMergePolicyOptimizer, gradients: list[SemanticGradient],
         snapshot: Snapshot) -> PolicyUpdatePlan:
    return asyncio.run(opt.plan(gradients, snapshot, PipelineContext()))


def with_train(repo: ExperienceRepository, **train: Any) -> ExperienceRepository:
    settings = repo.settings.model_copy(update={
        "train": repo.settings.train.model_copy(update=train)})
    return ExperienceRepository(repo.git, settings)


def user_prompt(messages: ChatMessages) -> str:
    return messages[1]["content"]


def test_no_gradients_no_call(seeded_repo: ExperienceRepository) -> None:
    opt, model = optimizer(seeded_repo)
    assert plan(opt, [], seeded_repo.snapshot()).items == []
    assert model.calls == []


def test_twenty_gradients_make_two_chunks_and_the_second_sees_the_first(
        seeded_repo: ExperienceRepository) -> None:
    snapshot = seeded_repo.snapshot()
    name = "flight-change-rules"
    original = snapshot.entries[name].text
    gradients = [gradient(i, name, snapshot, original + f"- rule {i}\n") for i in range(1, 21)]
    first = original + "- merged rule A\n"
    second = first + "- merged rule B\n"
    ids = [g.gradient_id or "" for g in gradients]

    def chunk_one(messages: ChatMessages) -> str:
        assert user_prompt(messages).count("### Gradient ") == 16
        return reply(item(name, "upsert", first, ids[:16]))

    def chunk_two(messages: ChatMessages) -> str:
        user = user_prompt(messages)
        assert user.count("### Gradient ") == 4
        assert "- merged rule A" in user  # the target as chunk one left it
        assert "Already planned in this update" in user
        return reply(item(name, "upsert", second, ids[16:]))

    opt, model = optimizer(seeded_repo, Step("merge", chunk_one), Step("merge", chunk_two))
    result = plan(opt, gradients, snapshot)
    model.assert_done()
    assert len(model.calls) == 2
    assert result.metadata["chunks"] == 2
    [only] = result.items
    assert only.kind == "upsert_experience" and only.after_content == second
    assert only.before_content == original
    assert only.base_version == snapshot.entries[name].version
    assert only.gradient_ids == ids
    assert only.evidence_trajectory_uris == [URI.format(i) for i in range(1, 21)]


def test_merge_split_delete_and_validation(seeded_repo: ExperienceRepository) -> None:
    snapshot = seeded_repo.snapshot()
    flight = snapshot.entries["flight-change-rules"].text
    baggage = snapshot.entries["checked-baggage-allowance"].text
    gradients = [
        gradient(1, "flight-change-rules", snapshot, flight + "- one\n", before="old text\n"),
        gradient(2, "flight-change-rules", snapshot, flight + "- two\n- fees: 100 USD\n"),
        gradient(3, "compensation-certificates", snapshot, None),
        gradient(4, "baggage-fees", snapshot, exp("baggage-fees", "Extra bags cost 50 USD.")),
    ]
    ids = [g.gradient_id or "" for g in gradients]
    merged = flight + "- one\n- two\n"
    split = exp("flight-change-fees", "Changes cost 100 USD.")
    dedup = baggage + "- Say the 50 USD fee up front.\n"
    opt, model = optimizer(seeded_repo, Step("merge", reply(
        item("flight-change-rules", "upsert", merged, [ids[0], ids[1]], 0.9),
        item("flight-change-fees", "upsert", split, [ids[1]], 0.6),
        item("compensation-certificates", "delete", None, [ids[2]]),
        item("checked-baggage-allowance", "upsert", dedup, ["not-a-gradient"]),
        item("never-existed", "delete", None, [ids[2]]),
        item("broken", "upsert", "no front matter", [ids[0]]),
        item("flight-change-fees", "upsert", split, [ids[1]]),
    )))
    result = plan(opt, gradients, snapshot)
    model.assert_done()

    items = {i.target_experience_name: i for i in result.items}
    assert sorted(items) == ["checked-baggage-allowance", "compensation-certificates",
                             "flight-change-fees", "flight-change-rules"]
    assert items["flight-change-rules"].after_content == merged
    assert items["flight-change-rules"].gradient_ids == ids[:2]
    assert items["flight-change-rules"].confidence == 0.9
    assert items["flight-change-rules"].evidence_trajectory_uris == [URI.format(1),
                                                                     URI.format(2)]
    assert items["flight-change-fees"].before_content is None
    assert items["flight-change-fees"].base_version == 0
    assert items["compensation-certificates"].kind == "delete_experience"
    assert items["compensation-certificates"].after_content is None
    # an item citing no gradient of the chunk is attributed to the whole chunk
    assert items["checked-baggage-allowance"].gradient_ids == ids
    assert all(i.gradient_ids for i in result.items)
    rejected = result.metadata["rejected_items"]
    assert len(rejected) == 3
    assert "does not exist" in rejected[0] and "missing front matter" in rejected[1]
    assert "second item" in rejected[2]

    user = user_prompt(model.calls[0][1])
    assert "--- a/experiences/flight-change-rules.md" in user
    assert "+++ b/experiences/flight-change-rules.md" in user and "+- two" in user
    assert "--- /dev/null" in user and "+++ /dev/null" in user
    assert f"Gradient {ids[0]}: update `flight-change-rules` (stale)" in user
    assert f"Gradient {ids[1]}: update `flight-change-rules`\n" in user
    assert "rationale 2 for flight-change-rules" in user and "confidence: 0.70" in user
    assert URI.format(4) in user
    assert "### baggage-fees (experiences/baggage-fees.md)\n\n(does not exist)" in user
    assert flight in user  # the current target, in full
    similar = user.split("## Similar existing files")[1]
    assert "### checked-baggage-allowance" in similar  # found by the lexical ranker
    assert "### flight-change-rules" not in similar  # targets are not repeated


OVERSIZED = exp("flight-change-rules", "\n".join(f"- rule number {i} " + "x" * 60
                                                  for i in range(60)))
COMPRESSED = exp("flight-change-rules", "- rule number 1, shortened\n")


def test_an_over_budget_item_is_compressed_once(seeded_repo: ExperienceRepository) -> None:
    snapshot = seeded_repo.snapshot()
    assert estimate_tokens(OVERSIZED) > seeded_repo.settings.token_budget
    g = gradient(1, "flight-change-rules", snapshot, OVERSIZED)

    def compress(messages: ChatMessages) -> str:
        assert "## flight-change-rules" in user_prompt(messages)
        assert "limit 800" in user_prompt(messages)
        return json.dumps({"items": [{"name": "flight-change-rules", "content": COMPRESSED}]})

    opt, model = optimizer(seeded_repo, Step("merge", reply(item(
        "flight-change-rules", "upsert", OVERSIZED, [g.gradient_id or ""]))),
        Step("compress", compress))
    result = plan(opt, [g], snapshot)
    model.assert_done()
    assert [c[0] for c in model.calls] == ["merge", "compress"]
    assert result.items[0].after_content == COMPRESSED
    assert result.metadata["compressed"] == ["flight-change-rules"]


def test_still_over_budget_after_compression_is_refused(
        seeded_repo: ExperienceRepository) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    before = repo_state(path)
    snapshot = seeded_repo.snapshot()
    g = gradient(1, "flight-change-rules", snapshot, OVERSIZED)
    opt, model = optimizer(seeded_repo, Step("merge", reply(item(
        "flight-change-rules", "upsert", OVERSIZED, [g.gradient_id or ""]))),
        Step("compress", json.dumps({"items": [
            {"name": "flight-change-rules", "content": OVERSIZED + "- more\n"}]})))
    with pytest.raises(ExpgitError, match=r"over the token budget.*flight-change-rules"):
        plan(opt, [g], snapshot)
    model.assert_done()
    assert repo_state(path) == before


def test_the_whole_set_budget_is_enforced(seeded_repo: ExperienceRepository) -> None:
    snapshot = seeded_repo.snapshot()
    total = sum(estimate_tokens(e.text) for e in snapshot.entries.values())
    repo = with_train(seeded_repo, total_token_budget=total + 40)
    new = exp("extra-rules", "- " + "y" * 400)
    g = gradient(1, "extra-rules", snapshot, new)
    opt, model = optimizer(repo, Step("merge", reply(item(
        "extra-rules", "upsert", new, [g.gradient_id or ""]))),
        Step("compress", json.dumps({"items": [{"name": "extra-rules", "content": new}]})))
    with pytest.raises(ExpgitError, match="whole experience set"):
        plan(opt, [g], snapshot)
    model.assert_done()
    assert "over its budget" in model.calls[1][1][0]["content"]

    # compressed enough: accepted
    small = exp("extra-rules", "- short")
    opt, model = optimizer(repo, Step("merge", reply(item(
        "extra-rules", "upsert", new, [g.gradient_id or ""]))),
        Step("compress", json.dumps({"items": [{"name": "extra-rules", "content": small}]})))
    assert plan(opt, [g], snapshot).items[0].after_content == small
