"""The status is a sum of one row per manifest in the derived index, moved forward by the
manifests a change touched, and may start from the branch's status checkpoint (a fresh
clone): after any mix of added, changed and removed sessions it equals a count of every
manifest, and the rows are built for every manifest where a checkpoint cannot be moved
forward (an invalidation, a removed load that was its day's last)."""

from __future__ import annotations

import json
import random

import pytest

from expgit.sessions.status import checkpoint as status_checkpoint
from expgit.sessions.status import counts as status_module
from expgit.sessions.status.counts import SessionsStatus, refresh_checkpoint, sessions_status
from expgit.sessions.status.ledger import Ledger
from expgit.sessions.store import MANIFESTS, SessionStore
from expgit.store.derived.cache import CACHE_DIR, INDEX_NAME
from expgit.store.repository import ExperienceRepository
from expgit.store.sidebranch import fanned

LIMIT = 5


def manifest(key: str, *, status: str = "segmented", trained: bool = False,
             segments: int = 1, invalidation: str | None = None,
             loads: list[tuple[str, str]] = ()) -> bytes:  # type: ignore[assignment]
    segment = {"start": 0, "end": 2, "fingerprint": f"fp{key}", "topic": "pets",
               "status": "active", "memory_eligible": trained, "sft_eligible": False,
               "trained": trained}
    rows = [dict(segment, fingerprint=f"fp{key}{i}") for i in range(segments)]
    if invalidation is not None:
        rows.append(dict(segment, status="superseded", fingerprint=f"old{key}",
                         invalidation={"proposal_id": invalidation}))
    return json.dumps({"version": 1, "session_key": key, "source_hash": key, "agent": "bot",
                       "format": "openai", "message_count": 2, "content_hash": key,
                       "status": status, "segments": rows,
                       "skill_loads": [{"skill": skill, "at": at, "message_index": 1}
                                       for skill, at in loads],
                       **({"started_at": min(at for _, at in loads),
                           "ended_at": max(at for _, at in loads)} if loads else {})}
                      ).encode()


def write(store: SessionStore, changes: dict[str, bytes | None]) -> None:
    store.branch.write({fanned(MANIFESTS, f"{k}.json"): v for k, v in changes.items()},
                       "sessions: test change")


def blobs_read(repo: ExperienceRepository, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The blob ids read from here on (every ``read_blobs`` call's)."""
    read: list[str] = []
    real = repo.git.read_blobs

    def spy(shas):  # type: ignore[no-untyped-def]
        wanted = list(shas)
        read.extend(wanted)
        return real(wanted)

    monkeypatch.setattr(repo.git, "read_blobs", spy)
    return read


def without_details(status: SessionsStatus) -> dict[str, object]:
    return status.model_dump(exclude={"details", "details_truncated"})


@pytest.fixture
def resets(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per build of the rows from nothing (whether a checkpoint could be its
    base)."""
    monkeypatch.setattr(status_module, "DETAILS_LIMIT", LIMIT)
    monkeypatch.setattr(status_checkpoint, "EVERY", 5)
    calls: list[bool] = []
    real = status_module._Folder._reset

    def spy(self: status_module._Folder, db: object, base_allowed: bool) -> None:
        calls.append(base_allowed)
        real(self, db, base_allowed)  # type: ignore[arg-type]

    monkeypatch.setattr(status_module._Folder, "_reset", spy)
    return calls


def forget_index(repo: ExperienceRepository) -> None:
    for path in (repo.git.common_dir / CACHE_DIR).glob(f"{INDEX_NAME}*"):
        path.unlink()


def every_manifest(repo: ExperienceRepository) -> Ledger:
    """The ledger summed from a row for every manifest (no checkpoint)."""
    return status_module._current(repo, SessionStore(repo), all_details=True)


def check(repo: ExperienceRepository) -> SessionsStatus:
    kept = sessions_status(repo)
    full = sessions_status(repo, all_details=True)
    assert without_details(kept) == without_details(full)
    assert kept.details == full.details[:LIMIT]
    assert kept.details_truncated == (full.sessions > LIMIT)
    return kept


def test_moved_forward_status_equals_a_whole_count_after_random_changes(
        seeded_repo: ExperienceRepository, resets: list[bool]) -> None:
    store = SessionStore(seeded_repo)
    rng = random.Random(28)
    live: set[str] = set()
    write(store, {f"{i:04x}": manifest(f"{i:04x}") for i in range(12)})
    live.update(f"{i:04x}" for i in range(12))
    assert refresh_checkpoint(seeded_repo) is not None
    check(seeded_repo)
    for round_ in range(25):
        changes: dict[str, bytes | None] = {}
        for _ in range(rng.randint(1, 4)):
            key = f"{rng.randrange(0x30):04x}"
            if key in live and rng.random() < 0.3:
                changes[key] = None
            else:  # loads of two skills on a few days, so a day's last load is shared
                loads = [(rng.choice(["bags", "refunds"]),
                          f"2026-11-{rng.randint(1, 3):02d}T10:00:{rng.randint(0, 3):02d}+00:00")
                         for _ in range(rng.randint(0, 3))]
                changes[key] = manifest(key, status=rng.choice(["pending", "segmented"]),
                                        trained=rng.random() < 0.5,
                                        segments=rng.randint(1, 3), loads=loads)
        live |= {k for k, v in changes.items() if v is not None}
        live -= {k for k, v in changes.items() if v is None}
        write(store, changes)
        if round_ % 7 == 6:
            refresh_checkpoint(seeded_repo)
        moved = status_module.sessions_ledger(seeded_repo)  # the last rows, moved forward
        forget_index(seeded_repo)  # as after a clone: from the checkpoint
        based = status_module.sessions_ledger(seeded_repo)
        whole = every_manifest(seeded_repo)
        assert whole.status.sessions == len(live), round_
        for ledger in (moved, based):
            assert without_details(ledger.status) == without_details(whole.status), round_
            assert ledger.status.details == whole.status.details[:LIMIT], round_
            assert ledger.usage == whole.usage, round_
    # after the index was deleted, a status started from the checkpoint (a build from
    # every manifest only where that cannot be told, e.g. a day's last load taken away
    # that other loads of that day still hold); every --all builds from every manifest
    assert resets.count(True) == 26 and resets.count(False) < 25 + 10, resets


def test_unchanged_manifests_are_not_read_when_moving_forward(
        seeded_repo: ExperienceRepository, resets: list[bool],
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(seeded_repo)
    write(store, {f"{i:04x}": manifest(f"{i:04x}") for i in range(40)})
    check(seeded_repo)
    read = blobs_read(seeded_repo, monkeypatch)
    write(store, {"0003": manifest("0003", trained=True), "ffff": manifest("ffff")})
    status = sessions_status(seeded_repo)
    assert status.sessions == 41 and status.trained == 1
    assert len(read) == 2  # the new 0003 and ffff: the old 0003's row is just deleted
    assert resets == [True]


def test_an_invalidation_is_counted_whole(seeded_repo: ExperienceRepository,
                                         resets: list[bool]) -> None:
    store = SessionStore(seeded_repo)
    write(store, {f"{i:04x}": manifest(f"{i:04x}") for i in range(8)})
    assert refresh_checkpoint(seeded_repo) is not None
    write(store, {"0002": manifest("0002", invalidation="p-1"),
                  "0005": manifest("0005", invalidation="p-0")})
    forget_index(seeded_repo)
    status = check(seeded_repo)
    assert status.invalidation_proposals == ["p-1", "p-0"]  # in session order
    # the checkpoint's writer; then the status: from the checkpoint, then every manifest
    assert resets == [True, True, False]
