"""The listing of listing mode: the reference library's ``to-prompt`` form (skills-ref's
own function is the oracle), and the budget (descriptions cut, then dropped from the
last skill backwards, then skills left out)."""

from __future__ import annotations

from pathlib import Path

from skill_listing_support import BAGGAGE, OTHER, skills_repo
from skills_ref import to_prompt
from skills_support import REFUND

from expgit.retrieval.skill_listing import build_listing
from expgit.store.format.experience import estimate_tokens
from expgit.store.repository import ExperienceRepository


def snapshot(tmp_path: Path):  # type: ignore[no-untyped-def]
    repo = ExperienceRepository.open(skills_repo(tmp_path))
    return repo.snapshot(repo.main_commit())


def test_the_listing_is_the_reference_to_prompt_form(tmp_path: Path) -> None:
    listing = build_listing(snapshot(tmp_path), budget_tokens=10_000, description_chars=1536)
    seed = tmp_path / "seed" / "skills"
    expected = to_prompt([seed / BAGGAGE, seed / OTHER])  # the always-on one is not listed
    # to_prompt names the absolute path of a checkout; expgit the path in the repository
    expected = expected.replace(str(seed.resolve()), "skills")
    assert listing.text == expected
    assert [i.name for i in listing.always] == [REFUND]
    assert listing.listed == [BAGGAGE, OTHER] and listing.omitted == [] and listing.cut == []


def test_the_budget_cuts_then_drops_descriptions_then_skills(tmp_path: Path) -> None:
    snap = snapshot(tmp_path)
    cut = build_listing(snap, budget_tokens=10_000, description_chars=20)
    assert cut.cut == [BAGGAGE, OTHER]
    assert "Use when a user ask…" in cut.text
    tight = build_listing(snap, budget_tokens=100, description_chars=1536)
    assert tight.cut == [OTHER] and tight.tokens <= 100 and tight.listed == [BAGGAGE, OTHER]
    tiny = build_listing(snap, budget_tokens=50, description_chars=1536)
    assert tiny.listed == [BAGGAGE] and tiny.omitted == [OTHER]
    assert estimate_tokens(tiny.text) <= 50
    assert set(tiny.skills) == {BAGGAGE, OTHER}  # a left-out skill is still loadable
