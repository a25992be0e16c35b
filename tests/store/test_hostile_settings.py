"""A repository's own files as an adversary writes them: settings naming a branch git
cannot have, or one expgit keeps for something else, are refused (exit 5, naming the
key, nothing written); a submodule entry under the experiences root is an invalid file
for ``validate`` and skipped by ``list`` and ``context``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, Driver, repo_state

OUTCOME = ["outcomes", "add", "--target-kind", "experience", "--target",
           "refund-method-rules", "--verdict", "helpful", "--score", "0.9",
           "--idempotency-key", "k-1"]


def _commit_settings(driver: Driver, extra: str) -> None:
    """Commit ``expgit.toml`` with ``extra`` at its end (in place of its ``main_branch``
    line if it sets one), past the hooks, as a plain push would bring it."""
    settings = driver.path / "expgit.toml"
    lines = [line for line in settings.read_text().splitlines()
             if not (extra.startswith("main_branch") and line.startswith("main_branch"))]
    settings.write_text("\n".join(lines) + "\n" + extra + "\n")
    driver.git("commit", "-qam", "hostile settings", "--no-verify")


BAD_SETTINGS = {
    "nul-in-main": ('main_branch = "ma\\u0000in"', "main_branch", "'ma\\x00in'"),
    "main-is-head": ('main_branch = "HEAD"', "main_branch", "'HEAD'"),
    "main-bad-ref": ('main_branch = "ma..in"', "main_branch", "check-ref-format"),
    "outcomes-in-proposals": ('[outcomes]\nbranch = "expgit/proposals/abcdef123456"',
                              "outcomes.branch", "expgit's proposal branches"),
    "outcomes-in-gradients": ('[outcomes]\nbranch = "expgit/gradients/x"',
                              "outcomes.branch", "expgit's gradient branches"),
    "outcomes-is-head": ('[outcomes]\nbranch = "HEAD"', "outcomes.branch", "'HEAD'"),
    "outcomes-is-main": ('[outcomes]\nbranch = "main"', "outcomes.branch", "main_branch"),
    "outcomes-a-lock": ('[outcomes]\nbranch = "x.lock"', "outcomes.branch", "'x.lock'"),
    "outcomes-an-option": ('[outcomes]\nbranch = "-x"', "outcomes.branch", "'-x'"),
    "outcomes-a-full-ref": ('[outcomes]\nbranch = "refs/heads/main"', "outcomes.branch",
                            "plain branch name"),
    "sessions-over-outcomes": ('[sessions]\nbranch = "expgit/outcomes/x"',
                               "outcomes.branch", "sessions.branch"),
    "trajectories-in-expgit": ('[train]\ntrajectories_branch = "expgit"',
                               "train.trajectories_branch", "expgit's gradient branches"),
}


@pytest.mark.parametrize(("extra", "key", "says"), BAD_SETTINGS.values(),
                         ids=BAD_SETTINGS.keys())
@pytest.mark.slow
def test_hostile_settings_are_refused_naming_the_key(driver: Driver, extra: str, key: str,
                                                     says: str) -> None:
    _commit_settings(driver, extra)
    before = driver.state()
    for args in (["list"], ["proposals"], OUTCOME):
        result = driver.fails(5, *args)
        assert result.out == ""
        assert f"{key}: " in result.err and says in result.err, result.err
        assert "\x00" not in result.err and "unexpected" not in result.err
    assert driver.state() == before  # nothing written: no outcome, no fake proposal
    assert driver.git("for-each-ref", "refs/heads/expgit/") == ""


def test_an_init_seed_with_hostile_settings_creates_nothing(run_cli: Any,
                                                            tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    shutil.copytree(EXAMPLE, seed)
    (seed / "expgit.toml").write_text('main_branch = "main"\n[outcomes]\n'
                                      'branch = "expgit/proposals/x"\n')
    result = run_cli("init", tmp_path / "new", "--from", seed)
    assert result.code == 5 and "outcomes.branch" in result.err, result.err
    assert not (tmp_path / "new").exists()


def test_sound_side_branches_still_work(driver: Driver) -> None:
    _commit_settings(driver, '[outcomes]\nbranch = "team/outcomes"\n'
                     '[sessions]\nbranch = "team/sessions"')
    driver.ok(*OUTCOME)
    assert driver.git("for-each-ref", "--format=%(refname)", "refs/heads/team/") \
        == "refs/heads/team/outcomes\n"


def test_a_submodule_under_the_experiences_root_is_an_invalid_file(driver: Driver) -> None:
    missing = "1234567890abcdef1234567890abcdef12345678"  # its commit is elsewhere
    for path in ("experiences/vendored", "experiences/vendored-rules.md"):
        driver.git("update-index", "--add", "--cacheinfo", f"160000,{missing},{path}")
    driver.git("commit", "-qm", "a submodule", "--no-verify")
    before = repo_state(driver.path)

    checked = driver.fails(5, "validate")
    for path in ("experiences/vendored", "experiences/vendored-rules.md"):
        assert f"{path}: not an experience file: a submodule" in checked.out + checked.err
    assert "unexpected" not in checked.err

    listed = driver.ok("list")
    names = [line.split()[0] for line in listed.out.splitlines()]
    assert "refund-method-rules" in names and not any("vendored" in n for n in names)
    assert driver.ok("context", "refund to the original payment method").out
    shown = driver.ok("context", "--json", "refund")
    assert "vendored" not in shown.out
    assert repo_state(driver.path) == before
