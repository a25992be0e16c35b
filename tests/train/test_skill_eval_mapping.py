"""The mapping of a skill eval's assertions to rubric checks (docs/skill-evals.md), the
paths of its files, and the policy without a skill made in memory."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from expgit.errors import InvalidInputError, NotFoundError
from expgit.init import init_repository
from expgit.store.repository import ExperienceRepository
from expgit.store.skill_evals_file import inside_folder, without_skill
from expgit.train.measurement.skill_evals import assertion_check, case_name


@pytest.mark.parametrize(("assertion", "expected"), [
    ('contains "3 free"', {"type": "contains", "value": "3 free"}),
    ("Mentions 'original payment method'.", {"type": "contains",
                                             "value": "original payment method"}),
    ('includes “refund”', {"type": "contains", "value": "refund"}),
    ('does not contain "voucher"', {"type": "not_contains", "value": "voucher"}),
    ("doesn't mention 'call us'", {"type": "not_contains", "value": "call us"}),
    ('must not include "TODO"', {"type": "not_contains", "value": "TODO"}),
    ('equals "42"', {"type": "equals", "value": "42"}),
    ("matches /\\d+ days/", {"type": "regex", "pattern": "\\d+ days", "ignore_case": False}),
    ("matches /eligible/i", {"type": "regex", "pattern": "eligible", "ignore_case": True}),
    ({"type": "numeric", "value": 3}, {"type": "numeric", "value": 3.0}),
])
def test_typed_assertions_become_checks(assertion: object, expected: dict[str, object]
                                        ) -> None:
    check = assertion_check(assertion, "expected", "f: case 0")  # type: ignore[arg-type]
    dumped = check.model_dump()
    assert {k: dumped[k] for k in expected} == expected


@pytest.mark.parametrize("sentence", [
    "Contains a bar chart", "The output mentions revenue", "contains 3 free",
    "The chart shows exactly 3 months"])
def test_other_sentences_go_to_the_judge(sentence: str) -> None:
    check = assertion_check(sentence, "A chart of the top months.", "f: case 0")
    assert check.type == "llm_judge"
    assert sentence in check.instructions and "A chart of the top months." in \
        check.instructions


@pytest.mark.parametrize(("assertion", "problem"), [
    ({"type": "sounds_right"}, "an assertion of an unknown form 'sounds_right'"),
    ({"type": "contains"}, "an assertion of an unknown form 'contains'"),
    ("matches /(/", "assertion 'matches /(/': invalid regular expression"),
    ('contains ""', "empty quoted text"),
])
def test_assertions_expgit_cannot_take_are_refused(assertion: object, problem: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        assertion_check(assertion, "x", "skills/a/evals/evals.json: case 2 (id 7)")  # type: ignore[arg-type]
    assert caught.value.message.startswith("skills/a/evals/evals.json: case 2 (id 7): ")
    assert problem in caught.value.message


def _raw_tree(listing: str) -> bytes:
    """The raw bytes of a tree from ``git ls-tree`` lines (a folder's mode without its
    leading 0, as git stores it)."""
    raw = b""
    for line in listing.splitlines():
        meta, name = line.split("\t", 1)
        mode, _, sha = meta.split()
        raw += mode.lstrip("0").encode() + b" " + name.encode() + b"\0" + bytes.fromhex(sha)
    return raw


@pytest.mark.parametrize(("path", "inside"), [
    ("evals/files/a.csv", True), ("a.txt", True), ("../b/SKILL.md", False),
    ("evals/../../x", False), ("/etc/passwd", False), ("./a.txt", False), ("", False),
    ("evals//a", False), ("evals\\..\\x", False)])
def test_files_stay_inside_the_skill_folder(path: str, inside: bool) -> None:
    assert inside_folder(path) is inside


def test_the_policy_without_a_skill_is_made_in_memory(tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    for name in ("alpha", "beta"):
        (seed / "skills" / name).mkdir(parents=True)
        (seed / "skills" / name / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: Use when {name}.\n---\nBody of {name}.\n")
    (seed / "expgit.toml").write_text('experiences_root = "skills"\nlayout = "skills"\n')
    init_repository(tmp_path / "repo", seed=seed)
    repo = ExperienceRepository.open(tmp_path / "repo")
    full = repo.snapshot()
    without = without_skill(repo, full, "alpha")
    assert without.names() == ["beta"] and full.names() == ["alpha", "beta"]
    # its id is the tree git would write for the root without alpha/, and none is written
    listing = subprocess.run(["git", "-C", str(tmp_path / "repo"), "ls-tree", full.id],
                             capture_output=True, text=True, check=True).stdout
    kept = "".join(line + "\n" for line in listing.splitlines() if not line.endswith("alpha"))
    expected = subprocess.run(["git", "-C", str(tmp_path / "repo"), "hash-object", "-t",
                               "tree", "--stdin"], input=_raw_tree(kept),
                              capture_output=True).stdout.decode().strip()
    assert without.id == expected != full.id
    assert subprocess.run(["git", "-C", str(tmp_path / "repo"), "cat-file", "-e", expected],
                          capture_output=True).returncode != 0  # never written
    with pytest.raises(NotFoundError, match="no skill 'gamma'"):
        without_skill(repo, full, "gamma")
    assert case_name("alpha", 3) == "alpha/3"
