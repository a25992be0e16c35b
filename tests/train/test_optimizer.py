"""PatchMergePolicyOptimizer: chunked LLM patch merge within token budgets."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from conftest import example_flat, repo_state

from expgit.core.domain import ExperienceFile, PolicyUpdatePlan, SemanticGradient
from expgit.errors import ExpgitError
from expgit.llm.port import ChatMessages, UsageMeter
from expgit.llm.scripted import ScriptedChatModel, Step
from expgit.llm.structured import StructuredLLM
from expgit.store.derived.snapshot import Snapshot
from expgit.store.format.experience import estimate_tokens, new_experience, parse_experience
from expgit.store.repository import ExperienceRepository
from expgit.train.components.llm_fields import (
    CHARS_PER_TOKEN,
    LOCAL_EDIT_LIMITS,
    NAME_PATTERN,
    schema_chars,
)
from expgit.train.components.llm_outputs import compress_output, merge_output
from expgit.train.components.policy_optimizer import PatchMergePolicyOptimizer
from expgit.train.context import PipelineContext

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


def body_of(text: str) -> str:
    return text.split("\n---\n", 1)[1]


def item(name: str, action: str, body: str, ids: list[str], confidence: float = 0.8, *,
         summary: str = "", tags: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "action": action, "gradient_ids": ids,
            "rationale": f"{action} {name}", "summary": summary, "tags": tags or [],
            "body": body, "confidence": confidence}


def compressed(name: str, body: str, summary: str = "") -> str:
    return json.dumps({"items": [{"name": name, "summary": summary, "body": body}]})


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
        return reply(item(name, "upsert", body_of(first), ids[:16]))

    def chunk_two(messages: ChatMessages) -> str:
        user = user_prompt(messages)
        assert user.count("### Gradient ") == 4
        assert "- merged rule A" in user  # the target as chunk one left it
        assert "Already planned in this update" in user
        return reply(item(name, "upsert", body_of(second), ids[16:]))

    opt, model = optimizer(seeded_repo, Step("merge", chunk_one), Step("merge", chunk_two))
    result = plan(opt, gradients, snapshot)
    model.assert_done()
    assert len(model.calls) == 2
    assert result.metadata.chunks == 2
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
    split_body = "# flight-change-fees\n\nChanges cost 100 USD.\n"
    split = new_experience("flight-change-fees", split_body, summary=RULES,
                           tags=["test"]).render()
    dedup = baggage + "- Say the 50 USD fee up front.\n"
    opt, model = optimizer(seeded_repo, Step("merge", reply(
        item("flight-change-rules", "upsert", body_of(merged), [ids[0], ids[1]], 0.9),
        item("flight-change-fees", "upsert", split_body, [ids[1]], 0.6, summary=RULES,
             tags=["test"]),
        item("compensation-certificates", "delete", "", [ids[2]]),
        item("checked-baggage-allowance", "upsert", body_of(dedup), ["not-a-gradient"]),
        item("never-existed", "delete", "", [ids[2]]),
        item("brand-new", "upsert", "", [ids[0]]),
        item("flight-change-fees", "upsert", split_body, [ids[1]]),
        item("checked-baggage-allowance", "upsert", "", [ids[0]]),
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
    assert items["flight-change-fees"].after_content == split
    assert items["checked-baggage-allowance"].after_content == dedup  # front matter kept
    rejected = result.metadata.rejected_items or []
    assert len(rejected) == 4
    assert "does not exist" in rejected[0] and "needs a body" in rejected[1]
    assert "second item" in rejected[2] and "second item" in rejected[3]

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


# Over the budget of 800 tokens although within the body's 1800 characters: "é" is two
# bytes, and the budget counts about 4 bytes per token.
RULES = "Follow the extra rules."
SHORTER = "Shorter rules for flight changes."
OVERSIZED_TEXT = "".join(chr(0x4E00 + i) for i in range(1700))  # 3 bytes each, no loop
# most of the current rules (9 of their 16 lines: the rules replaced whole would be a
# collapse) and a long text, within the reply's body bound
FLIGHT_CHANGE_LINES = [line for line in parse_experience(
    example_flat("flight-change-rules"), "x.md"
).body.splitlines() if line.strip()]
OVERSIZED_BODY = "\n".join([*FLIGHT_CHANGE_LINES[:9], OVERSIZED_TEXT[:1100]]) + "\n"
OVERSIZED = exp("flight-change-rules", OVERSIZED_TEXT)
COMPRESSED_BODY = "# flight-change-rules\n\n- rule number 1, shortened\n"


def test_an_over_budget_item_is_compressed_once(seeded_repo: ExperienceRepository) -> None:
    snapshot = seeded_repo.snapshot()
    assert estimate_tokens(OVERSIZED) > seeded_repo.settings.token_budget
    g = gradient(1, "flight-change-rules", snapshot, OVERSIZED)
    original = snapshot.entries["flight-change-rules"].text

    def compress(messages: ChatMessages) -> str:
        assert "## flight-change-rules" in user_prompt(messages)
        assert "limit 800" in user_prompt(messages)
        return compressed("flight-change-rules", COMPRESSED_BODY, SHORTER)

    opt, model = optimizer(seeded_repo, Step("merge", reply(item(
        "flight-change-rules", "upsert", OVERSIZED_BODY, [g.gradient_id or ""]))),
        Step("compress", compress))
    result = plan(opt, [g], snapshot)
    model.assert_done()
    assert [c[0] for c in model.calls] == ["merge", "compress"]
    after = parse_experience(result.items[0].after_content or "", "x.md")
    before = parse_experience(original, "x.md")
    assert after.body == COMPRESSED_BODY and after.front_matter.summary == SHORTER
    assert after.front_matter.tags == before.front_matter.tags  # the rest is kept
    assert result.metadata.compressed == ["flight-change-rules"]
    schema = model.calls[1][2]
    assert schema is not None and schema["json_schema"]["name"] == "CompressOutput"


def test_still_over_budget_after_compression_is_refused(
        seeded_repo: ExperienceRepository) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    before = repo_state(path)
    snapshot = seeded_repo.snapshot()
    g = gradient(1, "flight-change-rules", snapshot, OVERSIZED)
    opt, model = optimizer(seeded_repo, Step("merge", reply(item(
        "flight-change-rules", "upsert", OVERSIZED_BODY, [g.gradient_id or ""]))),
        Step("compress", compressed("flight-change-rules", OVERSIZED_BODY + "- more\n")))
    with pytest.raises(ExpgitError, match=r"over the token budget.*flight-change-rules"):
        plan(opt, [g], snapshot)
    model.assert_done()
    assert repo_state(path) == before


def test_the_whole_set_budget_is_enforced(seeded_repo: ExperienceRepository) -> None:
    snapshot = seeded_repo.snapshot()
    total = sum(estimate_tokens(e.text) for e in snapshot.entries.values())
    repo = with_train(seeded_repo, total_token_budget=total + 40)
    new_body = "# extra-rules\n\n- " + OVERSIZED_TEXT[:400] + "\n"
    g = gradient(1, "extra-rules", snapshot, exp("extra-rules", "- " + OVERSIZED_TEXT[:400]))
    opt, model = optimizer(repo, Step("merge", reply(item(
        "extra-rules", "upsert", new_body, [g.gradient_id or ""], summary=RULES))),
        Step("compress", compressed("extra-rules", new_body)))
    with pytest.raises(ExpgitError, match="whole experience set"):
        plan(opt, [g], snapshot)
    model.assert_done()
    assert "over its budget" in model.calls[1][1][0]["content"]

    # compressed enough: accepted
    opt, model = optimizer(repo, Step("merge", reply(item(
        "extra-rules", "upsert", new_body, [g.gradient_id or ""], summary=RULES))),
        Step("compress", compressed("extra-rules", "- Keep each rule short.")))
    small = new_experience("extra-rules", "- Keep each rule short.\n", summary=RULES).render()
    assert plan(opt, [g], snapshot).items[0].after_content == small


def test_the_merge_schema_carries_the_bounds_and_the_prompt_fits(
        seeded_repo: ExperienceRepository) -> None:
    snapshot = seeded_repo.snapshot()
    name = "flight-change-rules"
    gradients = [gradient(i, name, snapshot, snapshot.entries[name].text + f"- rule {i}\n")
                 for i in (1, 2)]

    def run(**options: Any) -> tuple[str, dict[str, Any]]:
        # grammar_bounds: the request carries the output model's bounds, as to the
        # embedded server (an API endpoint gets them left out: see wire_schema)
        opt = PatchMergePolicyOptimizer(seeded_repo, StructuredLLM(
            model, UsageMeter(), grammar_bounds=True), **options)
        plan(opt, gradients, snapshot)
        _, messages, response_format = model.calls[-1]
        assert response_format is not None
        return (messages[0]["content"] + messages[1]["content"],
                response_format["json_schema"]["schema"])

    model = ScriptedChatModel([Step("merge", reply()) for _ in range(3)])
    prompt, schema = run()
    props = schema["$defs"]["MergeItem"]["properties"]
    assert schema["title"] == "MergeOutput" and schema["properties"]["items"]["maxItems"] == 24
    assert props["body"] == {"maxLength": 1800, "type": "string"}
    assert props["name"]["pattern"] == NAME_PATTERN and props["name"]["maxLength"] == 80
    assert props["gradient_ids"]["maxItems"] == 2  # the chunk's size
    assert props["summary"]["maxLength"] == 200 and props["tags"]["maxItems"] == 6
    assert prompt.count("\n### ") == 2 + 1 + 5  # gradients, the target, similar files
    assert "at most 24 items" in prompt and "under 1800 characters" in prompt

    small, schema = run(limits=LOCAL_EDIT_LIMITS, similar_experiences=2)
    assert schema["properties"]["items"]["maxItems"] == 1
    assert schema["$defs"]["MergeItem"]["properties"]["body"]["maxLength"] == 900
    assert schema["$defs"]["MergeItem"]["properties"]["action"] == {"const": "upsert",
                                                                    "type": "string"}
    assert small.count("\n### ") == 2 + 1 + 2 and "at most 1 item." in small
    budget = (len(small) + schema_chars(merge_output(LOCAL_EDIT_LIMITS.for_budget(800), 2))
              ) // CHARS_PER_TOKEN - 1
    trimmed, _ = run(limits=LOCAL_EDIT_LIMITS, similar_experiences=2, prompt_tokens=budget)
    assert trimmed.count("\n### ") == 2 + 1 + 1  # the least similar file went first
    model.assert_done()
    compress = compress_output(LOCAL_EDIT_LIMITS).model_json_schema()
    assert compress["title"] == "CompressOutput"
    assert compress["$defs"]["CompressedFile"]["required"] == ["name", "summary", "body"]


def test_a_junk_compressed_file_fails_the_plan(seeded_repo: ExperienceRepository) -> None:
    snapshot = seeded_repo.snapshot()
    g = gradient(1, "flight-change-rules", snapshot, OVERSIZED)
    opt, model = optimizer(seeded_repo, Step("merge", reply(item(
        "flight-change-rules", "upsert", OVERSIZED_BODY, [g.gradient_id or ""]))),
        Step("compress", compressed("flight-change-rules", "1.2.3.5.0")))
    with pytest.raises(ExpgitError, match="compressed flight-change-rules is invalid: "
                       "degenerate: the body: it has no real words"):
        plan(opt, [g], snapshot)
    model.assert_done()
