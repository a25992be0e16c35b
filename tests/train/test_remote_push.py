"""RemotePublisher: a push that fails loses nothing and is reported; the next round sends
it all."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_only_fast_forwards, git, shared_server

from expgit.errors import UsageError
from expgit.store.derived import version_checkpoint
from expgit.store.repository import ExperienceRepository
from expgit.store.sidebranch import SideBranch
from expgit.train.remote_push import RemotePublisher


def test_a_failed_push_is_reported_and_the_next_round_sends_everything(
        tmp_path: Path) -> None:
    server, (path,) = shared_server(tmp_path, 1)
    repo = ExperienceRepository.open(path)
    SideBranch(repo, "expgit/trajectories", what="t").write({"trajectories/a.md": b"a\n"},
                                                             "a")
    gid = repo.main_commit()[:12]  # any commit stands in for a gradient's
    git(path, "update-ref", f"refs/heads/expgit/gradients/{gid}", repo.main_commit())
    publisher = RemotePublisher(repo, "origin")
    away = server.rename(tmp_path / "away.git")  # the server is unreachable for a while
    publisher.after_update([gid], None)
    report = publisher.finish()
    assert [e.split(":")[0] for e in report.errors] == ["expgit/trajectories",
                                                        "gradients and proposals"]
    assert report.pushed["gradients"] == 0
    assert git(path, "rev-parse", f"refs/heads/expgit/gradients/{gid}").strip()
    away.rename(server)
    report = publisher.finish()
    assert report.errors == [] and report.pushed["gradients"] == 1
    assert report.pushed["trajectories"] == 1
    assert git(server, "show", "expgit/trajectories:trajectories/a.md") == "a\n"
    assert_only_fast_forwards(server)


def test_finish_pushes_the_versions_checkpoint(tmp_path: Path) -> None:
    server, (path,) = shared_server(tmp_path, 1)
    repo = ExperienceRepository.open(path)
    tip = version_checkpoint.write(repo.git, repo.root, repo.main_commit(), {})
    report = RemotePublisher(repo, "origin").finish()
    assert report.errors == []
    assert git(server, "rev-parse", version_checkpoint.REF).strip() == tip
    assert_only_fast_forwards(server)


def test_an_unknown_remote_is_refused_at_once(tmp_path: Path) -> None:
    _, (path,) = shared_server(tmp_path, 1)
    with pytest.raises(UsageError, match="unknown remote 'elsewhere'"):
        RemotePublisher(ExperienceRepository.open(path), "elsewhere")
