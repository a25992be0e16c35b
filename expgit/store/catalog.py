"""The experience catalog as ``expgit list`` shows it, without parsing every file again.

A row needs a file's front matter (name, status, summary), its size (for the token
estimate) and whether it passes the per-file checks. Everything but the checks depends
on the file's content alone, so it is kept by blob id in a cache file in the git
directory (:mod:`expgit.store.derived`): a listing of 10,000 experiences then reads the
root tree, the versions and one cache file, and parses only the blobs it has not seen.
The checks that depend on the path and the settings (name = file name, token budget) run
every time, with :func:`~expgit.store.experience.check_fit`'s messages. A file that does
not parse is never cached: it is read and reported afresh each time.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from expgit.errors import InvalidInputError
from expgit.store.derived import cache_file, read_cache, write_cache
from expgit.store.experience import FrontMatter, check_fit, decode_experience, parse_experience
from expgit.store.repository import ExperienceRepository

CACHE_NAME = "front-matter.json"
KEEP = 50_000  # cached blobs at most: this listing's, then others seen before


def _format() -> str:
    schema = json.dumps(FrontMatter.model_json_schema(), sort_keys=True).encode()
    return "front-matter-1:" + hashlib.sha1(schema).hexdigest()[:16]


FORMAT = _format()


@dataclass
class ExperienceRow:
    name: str
    status: str
    version: int
    summary: str
    last_commit: str | None
    tokens: int
    problem: str | None = None


@dataclass(frozen=True)
class Catalog:
    commit: str
    snapshot_id: str  # tree id of the experiences root (the empty tree if there is none)
    rows: list[ExperienceRow]


def _parsed(data: bytes, path: str) -> dict[str, Any]:
    """What a row needs of one file's content; raises InvalidInputError if it breaks the
    schema (such a file is not cached)."""
    fm = parse_experience(decode_experience(data, path), path).front_matter
    return {"name": fm.name, "status": fm.status, "summary": fm.summary, "size": len(data)}


def _row(name: str, path: str, found: dict[str, Any], version: int, last: str | None,
         budget: int) -> ExperienceRow:
    size = int(found["size"])
    try:
        check_fit(str(found["name"]), (size + 3) // 4, path, name, budget)
    except InvalidInputError as exc:
        return ExperienceRow(name, "invalid", version, "", last, size // 4, exc.message)
    return ExperienceRow(name, str(found["status"]), version, str(found["summary"]), last,
                         (size + 3) // 4)


def catalog(repo: ExperienceRepository, rev: str | None = None) -> Catalog:
    """The rows of ``expgit list`` for ``main`` (or ``rev``), sorted by name."""
    commit = repo.commit(rev) if rev else repo.main_commit()
    loader = repo.snapshots
    root, files = loader.files_at(commit)
    versions = loader.versions(commit)
    path = cache_file(repo.git.common_dir, CACHE_NAME)
    cached = read_cache(path, FORMAT) or {}
    missing = [blob for _, blob in files.values() if blob not in cached]
    fresh: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    if missing:
        paths = {blob: file_path for file_path, blob in files.values()}
        for blob, data in repo.git.read_blobs(missing).items():
            try:
                fresh[blob] = _parsed(data, paths[blob])
            except InvalidInputError as exc:
                failed[blob] = exc.message
    rows: list[ExperienceRow] = []
    budget = repo.settings.token_budget
    for name in sorted(files):
        file_path, blob = files[name]
        info = versions.get(file_path)
        version, last = (info.version, info.last_commit) if info else (0, None)
        found = cached.get(blob) or fresh.get(blob)
        if found is None:
            size = len(repo.git.read_blob(blob))
            rows.append(ExperienceRow(name, "invalid", version, "", last, size // 4,
                                      failed.get(blob, f"{file_path}: cannot be read")))
        else:
            rows.append(_row(name, file_path, found, version, last, budget))
    if fresh:
        kept = {blob: cached[blob] for _, blob in files.values() if blob in cached}
        kept |= fresh
        for blob, value in cached.items():
            if len(kept) >= KEEP:
                break
            kept.setdefault(blob, value)
        write_cache(path, FORMAT, kept)
    return Catalog(commit, root, rows)
