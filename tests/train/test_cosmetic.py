"""An edit that changes only the form of an experience file is ``cosmetic`` (issue 24:
a capable small model turned ``"yes"`` into ``'yes'``, dropped blank lines and rewrote a
flow list of tags as a block list, and called that an update)."""

from __future__ import annotations

import pytest
from conftest import example_flat

from expgit.train.guards.cosmetic import only_cosmetic

# the example as a flat file, its tags in the flow list people write by hand
CURRENT = example_flat("checked-baggage-allowance").replace(
    "tags:\n- baggage\n- membership\n- pricing\n", "tags: [baggage, membership, pricing]\n")


@pytest.mark.parametrize("change", [
    lambda t: t.replace('"yes"', "'yes'"),
    lambda t: t.replace('"yes"', "\u201cyes\u201d"),
    lambda t: t.replace("\n\n", "\n"),
    lambda t: t.replace("\n- ", "\n* "),
    lambda t: t.replace("\n1. ", "\n1) "),
    lambda t: t.replace("tags: [baggage, membership, pricing]",
                        "tags:\n- baggage\n- membership\n- pricing"),
    lambda t: t.replace("summary: Compute", 'summary: "Compute').replace(
        "never remove bags.\n", 'never remove bags."\n', 1),
    lambda t: t.replace("Pitfalls:\n", "Pitfalls:   \n\n\n"),
    lambda t: t.replace("not the passenger", "not  the   passenger"),
])
def test_changes_of_form_only_are_cosmetic(change: object) -> None:
    new = change(CURRENT)  # type: ignore[operator]
    assert new != CURRENT
    assert only_cosmetic(CURRENT, new)


@pytest.mark.parametrize("change", [
    lambda t: t.replace("50 USD", "60 USD"),
    lambda t: t.replace("Pitfalls:\n", "Pitfalls:\n- Never waive the bag fee.\n"),
    lambda t: t.replace("tags: [baggage, membership, pricing]", "tags: [baggage]"),
    lambda t: t.replace("status: active", "status: draft"),
    lambda t: t.replace("| gold    | 2", "| gold    | 3"),
])
def test_a_change_of_substance_is_not(change: object) -> None:
    new = change(CURRENT)  # type: ignore[operator]
    assert new != CURRENT
    assert not only_cosmetic(CURRENT, new)


def test_identical_or_unreadable_files_are_not_cosmetic_changes() -> None:
    assert not only_cosmetic(CURRENT, CURRENT)  # "identical" is another check's reason
    assert not only_cosmetic(CURRENT, "no front matter at all")
