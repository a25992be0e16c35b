"""The versions checkpoint on the branch ``expgit/versions``: written when ``main`` is
EVERY commits past the last one, fetched by ``git clone`` (bare or not), and used by a
clone's first count so that only the commits after it are walked; always a cache: one
whose commit is not a linear ancestor, or that is junk, is ignored, and the versions are
always those one pass over the whole history gives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import RunCli, git

from expgit.git.repo import RefUpdate
from expgit.store.derived import snapshot as snapshot_module
from expgit.store.derived import version_checkpoint
from expgit.store.derived.cache import CACHE_DIR
from expgit.store.derived.snapshot import SnapshotLoader, VersionInfo
from expgit.store.derived.versions_refresh import refresh_checkpoint
from expgit.store.repository import ExperienceRepository

NAME = "checked-baggage-allowance"


def fresh(path: Path) -> ExperienceRepository:
    """The repository at ``path`` as a new process sees it: no loader in memory."""
    SnapshotLoader._instances.clear()
    return ExperienceRepository.open(path)


def cloned(path: Path) -> ExperienceRepository:
    """:func:`fresh`, and as a clone sees it: no derived data kept in the git directory."""
    repo = fresh(path)
    shutil.rmtree(repo.git.common_dir / CACHE_DIR, ignore_errors=True)
    return fresh(path)


def one_pass(repo: ExperienceRepository) -> dict[str, VersionInfo]:
    """The versions of main from one walk of the whole history, nothing stored used."""
    loader = SnapshotLoader(repo.git, repo.root, repo.settings.token_budget)
    loader._stored_loaded = True
    return loader.versions(repo.main_commit())


def edit(path: Path, times: int, tag: str, name: str = NAME) -> None:
    for i in range(times):
        file = path / "experiences" / f"{name}.md"
        file.write_text(file.read_text(encoding="utf-8") + f"\n{tag} {i}.\n", encoding="utf-8")
        git(path, "-c", "core.hooksPath=/dev/null", "commit", "-q", "-am", f"{tag} {i}")


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The revisions of every `git log` pass the loader makes."""
    seen: list[list[str]] = []
    real = snapshot_module._log_changes

    def recording(git, revs, root):  # type: ignore[no-untyped-def]
        seen.append(list(revs))
        return real(git, revs, root)

    monkeypatch.setattr(snapshot_module, "_log_changes", recording)
    return seen


@pytest.fixture
def every_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(version_checkpoint, "EVERY", 3)


@pytest.mark.parametrize(("bare", "far"), [(True, False), (False, False), (True, True),
                                           (False, True)])
def test_a_clone_starts_from_the_checkpoint_it_fetched(
        seeded_repo: ExperienceRepository, tmp_path: Path, every_3: None,
        walks: list[list[str]], bare: bool, far: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    origin = seeded_repo.git.work_tree
    assert origin is not None
    edit(origin, 3, "before")
    tip = refresh_checkpoint(fresh(origin))
    assert tip is not None
    checkpoint = fresh(origin).main_commit()
    edit(origin, 2, "after")
    clone = tmp_path / ("clone.git" if bare else "clone")
    git(tmp_path, "clone", "-q", *(["--bare"] if bare else []), str(origin), str(clone))
    walks.clear()
    if far:  # further back than the loader walks looking for known versions
        monkeypatch.setattr(snapshot_module, "_ANCESTOR_WALK", 1)
    repo = fresh(clone)
    got = repo.snapshots.versions(repo.main_commit())
    # only the 2 commits after it: diffed in-process, or (far) one `git log` of them
    assert walks == ([[repo.main_commit(), f"^{checkpoint}"]] if far else [])
    assert got == one_pass(repo)
    assert got[f"experiences/{NAME}.md"].version == 6  # the seed, 3 and 2 edits


def test_written_only_when_due_each_on_the_last(seeded_repo: ExperienceRepository,
                                                every_3: None, run_cli: RunCli) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    assert refresh_checkpoint(fresh(path)) is None  # 1 commit: none due
    edit(path, 2, "a")
    assert run_cli("-C", path, "doctor", "--fix").code == 0
    first = git(path, "rev-parse", version_checkpoint.REF).strip()
    assert run_cli("-C", path, "doctor", "--fix").code == 0
    assert git(path, "rev-parse", version_checkpoint.REF).strip() == first  # not due
    edit(path, 3, "b")
    second = refresh_checkpoint(fresh(path))
    assert second is not None
    assert git(path, "rev-parse", f"{second}^").strip() == first  # a fast-forward
    data = json.loads(git(path, "show", f"{second}:{version_checkpoint.file_name('experiences')}"))
    repo = fresh(path)
    assert data["commit"] == repo.main_commit()
    assert {p: tuple(v) for p, v in data["versions"].items()} == \
        {p: (v.version, v.last_commit, v.first_commit) for p, v in one_pass(repo).items()}


def plant(repo: ExperienceRepository, commit: str, versions: object) -> None:
    data = json.dumps({"format": version_checkpoint.FORMAT, "root": repo.root,
                       "commit": commit, "versions": versions}).encode()
    tree = repo.git.edit_tree(None, {version_checkpoint.file_name(repo.root):
                                     repo.git.write_blob(data)})
    new = repo.git.write_commit(tree, [], "planted\n")
    repo.git.update_refs([RefUpdate(version_checkpoint.REF, new,
                                    repo.git.ref(version_checkpoint.REF))], "test")


def test_a_checkpoint_not_on_mains_line_or_of_junk_is_ignored(
        seeded_repo: ExperienceRepository, walks: list[list[str]]) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    edit(path, 2, "x")
    repo = fresh(path)
    truth = one_pass(repo)
    git(path, "checkout", "-q", "-b", "side", "HEAD~1")
    edit(path, 1, "side")
    side = git(path, "rev-parse", "HEAD").strip()
    git(path, "checkout", "-q", "main")
    lies = {p: [99, side, side] for p in truth}
    for commit, versions in ((side, lies), ("f" * 40, lies), (repo.main_commit(), "junk"),
                             (repo.main_commit(), {"../outside.md": [1, side, side]})):
        plant(repo, commit, versions)
        walks.clear()
        assert cloned(path).snapshots.versions(repo.main_commit()) == truth
        assert walks == [[repo.main_commit()]]  # the whole history, as without one


def test_a_merge_after_the_checkpoint_counts_the_whole_history(
        seeded_repo: ExperienceRepository, walks: list[list[str]]) -> None:
    path = seeded_repo.git.work_tree
    assert path is not None
    repo = fresh(path)
    base = repo.main_commit()
    plant(repo, base, {p: [v.version, v.last_commit, v.first_commit]
                       for p, v in one_pass(repo).items()})
    git(path, "checkout", "-q", "-b", "side")
    edit(path, 1, "side", "compensation-certificates")
    git(path, "checkout", "-q", "main")
    edit(path, 1, "main")
    git(path, "-c", "core.hooksPath=/dev/null", "merge", "-q", "--no-edit", "side")
    walks.clear()
    repo = cloned(path)
    assert repo.snapshots.versions(repo.main_commit()) == one_pass(repo)
    assert walks[0] == [repo.main_commit()]
