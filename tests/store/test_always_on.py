"""The always-on block of AGENTS.md (issue 33 item 3): the skills marked
``expgit-always: "true"`` are written between expgit's marker lines, in the same commit
as the change that alters them, through the real CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Driver, git
from skills_support import REFUND, REFUND_MD
from test_skills_layout import seed

from expgit.init import init_repository
from expgit.store.format.always_on import END, MAX_BYTES, START

HEAD = b"# Project rules\n\nUse tabs in the Makefile.\r\n\n"
TAIL = b"\n## Written by hand\n\nNo trailing newline here"


def make(run_cli: Any, tmp_path: Path, settings: str = "") -> Driver:
    folder = seed(tmp_path)
    if settings:
        with (folder / "expgit.toml").open("a") as toml:
            toml.write(settings)
    init_repository(tmp_path / "repo", seed=folder)
    return Driver(run_cli, tmp_path / "repo", tmp_path / "scratch")


@pytest.fixture
def skills(run_cli: Any, tmp_path: Path) -> Driver:
    return make(run_cli, tmp_path)


def human_commit(d: Driver, files: dict[str, bytes]) -> None:
    """A developer's own commit of ``files`` on main, by plain git."""
    for name, data in files.items():
        path = d.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        git(d.path, "add", name)
    git(d.path, "commit", "-q", "-m", "by hand")


def refs(d: Driver) -> str:
    """Every ref with its target: equal before and after = no ref written (the refused
    command may leave unreferenced objects, as git does)."""
    return d.git("for-each-ref")


def shown(d: Driver, path: str, rev: str = "main") -> bytes:
    import subprocess
    return subprocess.run(["git", "-C", str(d.path), "show", f"{rev}:{path}"],
                          capture_output=True, check=True).stdout


def block_of(data: bytes) -> bytes:
    start, end = data.index(START.encode()), data.index(END.encode()) + len(END) + 1
    return data[start:end]


def refund_with(body: str, always: bool = True) -> str:
    text = REFUND_MD.replace("Refund to the original payment method unless the customer "
                             "asks for a voucher.\n", body)
    return text if always else text.replace('expgit-always: "true"', 'expgit-always: "false"')


def changed_files(d: Driver, rev: str = "main") -> list[str]:
    return d.git("diff-tree", "-r", "--name-only", "--no-commit-id", f"{rev}~1",
                 rev).split()


def test_init_writes_the_block_of_the_always_on_skills(skills: Driver) -> None:
    agents = shown(skills, "AGENTS.md")
    assert agents.startswith(START.encode()) and agents.endswith(END.encode() + b"\n")
    assert b"### refund-rules" in agents
    assert b"Refund to the original payment method" in agents
    assert b"fix-flaky-tests" not in agents  # not always-on
    assert "all experiences valid" in skills.ok("validate").out


def test_apply_rewrites_the_block_in_the_same_commit_and_keeps_the_text_around_it(
        skills: Driver) -> None:
    d = skills
    old_block = block_of(shown(d, "AGENTS.md"))
    human_commit(d, {"AGENTS.md": HEAD + old_block + TAIL})
    pid = d.merge(d.propose(REFUND, refund_with("Always refund within 14 days.\n")))
    d.apply(pid)
    assert sorted(changed_files(d)) == ["AGENTS.md", f"skills/{REFUND}/SKILL.md"]
    agents = shown(d, "AGENTS.md")
    new_block = block_of(agents)
    assert agents == HEAD + new_block + TAIL  # byte for byte outside the block
    assert b"Always refund within 14 days." in new_block
    assert b"original payment method" not in new_block
    assert "all experiences valid" in d.ok("validate").out

    # revert brings the old block back, in the revert's commit
    d.ok("revert", "main")
    assert shown(d, "AGENTS.md") == HEAD + old_block + TAIL

    # a skill no longer always-on leaves an empty block (markers kept)
    d.apply(d.merge(d.propose(REFUND, refund_with("x\n", always=False))))
    assert b"### refund-rules" not in shown(d, "AGENTS.md")
    assert shown(d, "AGENTS.md").startswith(HEAD + START.encode())


def test_a_file_without_a_block_gets_it_appended(skills: Driver) -> None:
    d = skills
    human_commit(d, {"AGENTS.md": TAIL})
    d.apply(d.merge(d.propose(REFUND, refund_with("New rule.\n"))))
    agents = shown(d, "AGENTS.md")
    assert agents.startswith(TAIL + b"\n\n" + START.encode())
    assert b"New rule." in agents


@pytest.mark.parametrize("damage", [START, END])
@pytest.mark.slow
def test_a_damaged_block_is_refused_and_nothing_is_written(skills: Driver,
                                                           damage: str) -> None:
    d = skills
    human_commit(d, {"AGENTS.md": HEAD + damage.encode() + b"\n" + TAIL})
    before = refs(d)
    out = d.fails(5, "propose", REFUND, "--rationale", "x", "--content-file",
                  d.file(refund_with("Other.\n")))
    assert "AGENTS.md" in out.err and "damaged" in out.err
    assert refs(d) == before
    assert "AGENTS.md" in d.fails(5, "validate").out


def test_a_change_past_32_kib_is_refused(run_cli: Any, tmp_path: Path) -> None:
    d = make(run_cli, tmp_path)
    filler = b"".join(b"- house rule %d: keep it short\n" % i for i in range(2000))
    agents = shown(d, "AGENTS.md")
    room = MAX_BYTES - len(agents) - 200
    human_commit(d, {"AGENTS.md": filler[:room].rsplit(b"\n", 1)[0] + b"\n\n" + agents})
    assert len(shown(d, "AGENTS.md")) <= MAX_BYTES
    before = refs(d)
    long_body = "".join(f"Rule {i}: refund in the original currency.\n" for i in range(20))
    out = d.fails(5, "propose", REFUND, "--rationale", "x", "--content-file",
                  d.file(refund_with(long_body)))
    assert "AGENTS.md" in out.err and "32 KiB" in out.err
    assert refs(d) == before
    # a change that keeps it within the limit goes through
    d.apply(d.merge(d.propose(REFUND, refund_with("Short.\n"))))
    assert len(shown(d, "AGENTS.md")) <= MAX_BYTES


def test_claude_md_with_always_on_files(run_cli: Any, tmp_path: Path) -> None:
    d = make(run_cli, tmp_path, '\n[skills]\nalways_on_files = ["AGENTS.md", "CLAUDE.md"]\n')
    assert block_of(shown(d, "CLAUDE.md")) == block_of(shown(d, "AGENTS.md"))
    human_commit(d, {"CLAUDE.md": b"@AGENTS.md\n\n" + shown(d, "CLAUDE.md")})
    d.apply(d.merge(d.propose(REFUND, refund_with("Claude reads this too.\n"))))
    assert sorted(changed_files(d)) == ["AGENTS.md", "CLAUDE.md", f"skills/{REFUND}/SKILL.md"]
    claude = shown(d, "CLAUDE.md")
    assert claude.startswith(b"@AGENTS.md\n\n" + START.encode())
    assert b"Claude reads this too." in claude


def test_validate_names_a_block_out_of_date(skills: Driver) -> None:
    d = skills
    human_commit(d, {f"skills/{REFUND}/SKILL.md": refund_with("Edited by hand.\n").encode()})
    out = d.fails(5, "validate")
    assert "AGENTS.md: the always-on block is out of date" in out.out
    # the next change through expgit rewrites it
    d.apply(d.merge(d.propose(REFUND, refund_with("Through review.\n"))))
    assert "all experiences valid" in d.ok("validate").out


def test_a_flat_repository_gets_no_agents_md(driver: Driver) -> None:
    d = driver
    d.apply(d.merge(d.propose("alpha", "---\nname: alpha\nalways: true\n---\nBody.\n")))
    assert "AGENTS.md" not in d.git("ls-tree", "--name-only", "main").split()
