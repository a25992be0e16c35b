"""``expgit list``'s catalog and the derived data it keeps in the git directory.

The catalog must say exactly what parsing every file says (the snapshot's own rows are
the reference), whether its cache is cold, warm, deleted, corrupt or of another format;
and the versions another process stored must give the same versions as one ``git log``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import git

from expgit.errors import InvalidInputError
from expgit.store.derived import catalog as catalog_module
from expgit.store.derived.cache import DerivedIndex, index_file
from expgit.store.derived.catalog import ExperienceRow, catalog
from expgit.store.derived.snapshot import Snapshot, SnapshotLoader
from expgit.store.derived.version_cache import load_versions, save_versions
from expgit.store.repository import ExperienceRepository


def reference_rows(snapshot: Snapshot) -> list[ExperienceRow]:
    """The rows as parsing every file of the snapshot gives them."""
    rows = []
    for name in snapshot.names():
        entry = snapshot.entries[name]
        try:
            fm = entry.experience.front_matter
            rows.append(ExperienceRow(name, fm.status, entry.version, fm.summary,
                                      entry.last_commit, (len(entry.data) + 3) // 4))
        except InvalidInputError as exc:
            rows.append(ExperienceRow(name, "invalid", entry.version, "", entry.last_commit,
                                      len(entry.data) // 4, exc.message))
    return rows


def fresh(repo: ExperienceRepository) -> ExperienceRepository:
    """The repository as a new process sees it: no loader kept in memory."""
    SnapshotLoader._instances.clear()
    return ExperienceRepository.open(repo.git.work_tree or repo.git.git_dir)


def commit_files(repo: ExperienceRepository, files: dict[str, str], message: str) -> None:
    work = repo.git.work_tree
    assert work is not None
    for rel, text in files.items():
        (work / rel).write_text(text, encoding="utf-8")
    git(work, "add", "-A")
    git(work, "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", message)


def index_rows(repo: ExperienceRepository, table: str) -> int:
    with DerivedIndex.open(repo.git.common_dir) as ix:
        return int(ix.db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def forget_listing(repo: ExperienceRepository) -> None:
    """Drop the kept rows of the last listing, so the front matter rows answer."""
    with DerivedIndex.open(repo.git.common_dir) as ix:
        ix.update(lambda db: db.execute("DELETE FROM catalog_rows"))


@pytest.fixture
def repo(seeded_repo: ExperienceRepository) -> ExperienceRepository:
    commit_files(seeded_repo, {
        "experiences/not-yaml.md": "---\nname: [unclosed\n---\nbody\n",
        "experiences/wrong-name.md": "---\nname: other-name\n---\nbody\n",
        "experiences/too-long.md": "---\nname: too-long\n---\n" + "word " * 2000,
    }, "three invalid files")
    return fresh(seeded_repo)


def test_cold_and_warm_catalogs_match_parsing_every_file(repo: ExperienceRepository) -> None:
    expected = reference_rows(repo.snapshot())
    assert {r.status for r in expected} >= {"active", "invalid"}
    cold = catalog(fresh(repo))
    assert cold.rows == expected
    assert cold.commit == repo.main_commit() and cold.snapshot_id == repo.snapshot().id
    valid = [r for r in expected if r.problem is None or "YAML" not in r.problem]
    assert index_rows(repo, "front_matter") == len(valid)  # every file that parses, only
    assert catalog(fresh(repo)).rows == expected


def test_a_warm_catalog_parses_nothing(repo: ExperienceRepository,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    catalog(fresh(repo))
    parsed: list[str] = []
    real = catalog_module._parsed

    def counting(data: bytes, path: str) -> tuple[str, str, str, int]:
        parsed.append(path)
        return real(data, path)

    monkeypatch.setattr(catalog_module, "_parsed", counting)
    expected = reference_rows(repo.snapshot())
    assert catalog(fresh(repo)).rows == expected
    assert parsed == []  # the same commit again: its stored rows
    forget_listing(repo)
    assert catalog(fresh(repo)).rows == expected
    assert parsed == ["experiences/not-yaml.md"]  # only the file that never caches


@pytest.mark.parametrize("table", ["front_matter", "catalog_rows"])
@pytest.mark.parametrize("damage", ["delete", "garbage", "other-schema"])
def test_a_damaged_index_is_rebuilt(repo: ExperienceRepository, damage: str,
                                    table: str) -> None:
    catalog(fresh(repo))
    if table == "front_matter":  # the stored rows would answer first
        forget_listing(repo)
    path = index_file(repo.git.common_dir)
    if damage == "delete":
        path.unlink()
    elif damage == "garbage":
        path.write_bytes(b"\x00not sqlite{" * 1000)
    else:  # stale rows of an expgit that parsed differently
        with DerivedIndex.open(repo.git.common_dir) as ix:
            ix.update(lambda db: (
                db.execute("UPDATE front_matter SET status = 'retired', summary = 'stale'"),
                db.execute("UPDATE catalog_rows SET status = 'retired', version = 9"),
                db.execute("UPDATE folds SET schema_version = 0")))
    assert catalog(fresh(repo)).rows == reference_rows(repo.snapshot())
    assert index_rows(repo, table) > 0


def test_an_edit_shows_at_once_and_the_settings_checks_run_every_time(
        repo: ExperienceRepository) -> None:
    catalog(fresh(repo))
    name = "checked-baggage-allowance"
    text = repo.snapshot().entries[name].text.replace("summary:", "summary: EDITED", 1)
    commit_files(repo, {f"experiences/{name}.md": text}, "edit one")
    rows = {r.name: r for r in catalog(fresh(repo)).rows}
    assert rows[name].summary.startswith("EDITED") and rows[name].version == 2
    # a smaller budget changes no blob, yet the cached files are checked against it
    settings = (repo.git.work_tree / "expgit.toml").read_text()  # type: ignore[operator]
    commit_files(repo, {"expgit.toml": settings.replace("token_budget = 800",
                                                        "token_budget = 50")}, "budget")
    again = fresh(repo)
    assert again.settings.token_budget == 50
    rows = {r.name: r for r in catalog(again).rows}
    assert rows[name].status == "invalid" and "over the budget of 50" in (rows[name].problem
                                                                          or "")
    assert catalog(again).rows == reference_rows(again.snapshot())


def test_a_read_only_git_directory_lists_without_a_cache(repo: ExperienceRepository,
                                                          tmp_path: Path) -> None:
    blocker = repo.git.common_dir / "expgit"
    blocker.write_text("a file where the cache folder would go")
    assert catalog(fresh(repo)).rows == reference_rows(repo.snapshot())
    assert blocker.read_text() == "a file where the cache folder would go"


def test_stored_versions_are_reused_and_extended_exactly(repo: ExperienceRepository) -> None:
    first = fresh(repo)
    first.snapshot()
    stored = load_versions(repo.git.common_dir, repo.root)
    assert stored is not None and stored[0] == repo.main_commit()
    name = "checked-baggage-allowance"
    for i in range(3):
        text = first.snapshot().entries[name].text + f"\nLine {i}.\n"
        commit_files(repo, {f"experiences/{name}.md": text}, f"edit {i}")
    derived = fresh(repo).snapshots.versions(repo.main_commit())  # from the stored ones
    SnapshotLoader._instances.clear()
    loader = SnapshotLoader(repo.git, repo.root, repo.settings.token_budget)
    loader._stored_loaded = True  # one `git log` pass, nothing stored used
    assert derived == loader.versions(repo.main_commit())
    assert derived[f"experiences/{name}.md"].version == 4


def test_stored_versions_of_an_unknown_commit_are_not_used(repo: ExperienceRepository) -> None:
    fresh(repo).snapshot()
    stored = load_versions(repo.git.common_dir, repo.root)
    assert stored is not None
    save_versions(repo.git.common_dir, repo.root, "f" * 40,
                  {p: (99, "f" * 40, "f" * 40) for p in stored[1]})
    versions = fresh(repo).snapshots.versions(repo.main_commit())
    assert {v.version for v in versions.values()} <= {1, 2}
