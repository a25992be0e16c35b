"""``show --version N`` from the version cache: the last version without a walk, an
older one by walking back from the last commit only as far as it; the same answers as
counting the file's whole history."""

from __future__ import annotations

import json

import pytest
from conftest import RunCli, git

from expgit.store.repository import ExperienceRepository

NAME = "checked-baggage-allowance"
PATH = f"experiences/{NAME}.md"


@pytest.mark.slow
def test_every_version_is_the_one_its_history_counts(seeded_repo: ExperienceRepository,
                                                     run_cli: RunCli) -> None:
    work = seeded_repo.git.work_tree
    assert work is not None
    original = (work / PATH).read_text()
    for i in range(1, 5):
        (work / PATH).write_text(original + f"\nRevision {i}.\n")
        git(work, "commit", "-qam", f"revision {i}")
        (work / "other.txt").write_text(f"unrelated {i}\n")  # commits not touching it
        git(work, "add", "other.txt")
        git(work, "commit", "-qm", f"unrelated {i}")
    history = git(work, "log", "--format=%H", "--reverse", "--", PATH).split()
    assert len(history) == 5
    for attempt in range(2):  # a fresh cache, then the one the first run stored
        for version, commit in enumerate(history, start=1):
            shown = run_cli("-C", work, "show", NAME, "--version", str(version), "--json")
            assert shown.code == 0, shown.err
            data = json.loads(shown.out)
            assert (data["version"], data["commit"]) == (version, commit), attempt
            assert data["content"] == git(work, "show", f"{commit}:{PATH}")
    missing = run_cli("-C", work, "show", NAME, "--version", "6")
    assert missing.code == 5 and "versions 1 to 5, not 6" in missing.err


@pytest.mark.slow
def test_the_first_version_comes_from_the_versions_without_a_walk(
        seeded_repo: ExperienceRepository, run_cli: RunCli,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from expgit.git.repo import GitRepo

    work = seeded_repo.git.work_tree
    assert work is not None
    original = (work / PATH).read_text()
    for i in range(1, 4):
        (work / PATH).write_text(original + f"\nRevision {i}.\n")
        git(work, "commit", "-qam", f"revision {i}")
    first = git(work, "log", "--format=%H", "--reverse", "--", PATH).split()[0]
    assert run_cli("-C", work, "list", "--json").code == 0  # the versions kept
    walks: list[tuple[str, ...]] = []
    real = GitRepo.out

    def recording(self: GitRepo, *args: str, input: bytes | None = None) -> str:
        if args[:1] == ("log",):
            walks.append(args)
        return real(self, *args, input=input)

    monkeypatch.setattr(GitRepo, "out", recording)
    shown = run_cli("-C", work, "show", NAME, "--version", "1", "--json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["commit"] == first
    assert walks == []  # no `git log` of the file's history
    second = run_cli("-C", work, "show", NAME, "--version", "2", "--json")
    assert second.code == 0 and walks  # an older one than the last still walks back
