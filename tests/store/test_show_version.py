"""``show --version N`` from the version cache: the last version without a walk, an
older one by walking back from the last commit only as far as it; the same answers as
counting the file's whole history."""

from __future__ import annotations

import json

from conftest import git

from expgit.store.repository import ExperienceRepository

NAME = "checked-baggage-allowance"
PATH = f"experiences/{NAME}.md"


def test_every_version_is_the_one_its_history_counts(seeded_repo: ExperienceRepository,
                                                     run_cli) -> None:
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
