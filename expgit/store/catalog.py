"""The experience catalog as ``expgit list`` shows it, without parsing every file again.

A row needs a file's front matter (name, status, summary), its size (for the token
estimate) and whether it passes the per-file checks. Everything but the checks depends
on the file's content alone, so it is kept by blob id in a cache file in the git
directory (:mod:`expgit.store.derived`): a listing of 10,000 experiences then reads the
root tree, the versions and one cache file, and parses only the blobs it has not seen.
The checks that depend on the path and the settings (name = file name, token budget) run
every time, with :func:`~expgit.store.experience.check_fit`'s messages. A file that does
not parse is never cached: it is read and reported afresh each time.

The rows of the last commit listed are kept too, keyed by that commit, the experiences
root and the token budget (everything a row depends on), so listing the same ``main``
again reads one file and no tree.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from expgit import __version__
from expgit.errors import InvalidInputError
from expgit.store.derived import cache_file, keyed_cache_file, read_cache, write_cache
from expgit.store.experience import (
    FrontMatter,
    check_fit,
    decode_experience,
    parse_experience,
    tokens_of_bytes,
)
from expgit.store.repository import ExperienceRepository

CACHE_NAME = "front-matter.json"
ROWS_PREFIX = "catalog-"  # + a digest of what the rows depend on: a stale file is never read
KEEP = 50_000  # cached blobs at most: this listing's, then others seen before
REWRITE_AFTER = 200  # new blobs that make the cache file worth rewriting (or 2% of it)


def _format() -> str:
    """Names what produced a cached entry: the front matter schema and the code that
    parses and checks files. Another expgit (or an edited one) ignores the caches."""
    from expgit.store import experience

    digest = hashlib.sha1(json.dumps(FrontMatter.model_json_schema(), sort_keys=True).encode())
    for module in (experience.__file__, __file__):
        try:
            digest.update(Path(module).read_bytes())
        except OSError:  # no source beside the code: the version alone
            digest.update(__version__.encode())
    return "catalog-1:" + digest.hexdigest()[:16]


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

    def as_dict(self) -> dict[str, Any]:
        """The row as ``expgit list --json`` prints it (``dataclasses.asdict``, faster)."""
        return {"name": self.name, "status": self.status, "version": self.version,
                "summary": self.summary, "last_commit": self.last_commit,
                "tokens": self.tokens, "problem": self.problem}


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


def _invalid(name: str, version: int, last: str | None, size: int,
             problem: str) -> ExperienceRow:
    return ExperienceRow(name, "invalid", version, "", last, size // 4, problem)


def _row(name: str, path: str, found: dict[str, Any], version: int, last: str | None,
         budget: int) -> ExperienceRow:
    size = int(found["size"])
    try:
        check_fit(str(found["name"]), tokens_of_bytes(size), path, name, budget)
    except InvalidInputError as exc:
        return _invalid(name, version, last, size, exc.message)
    return ExperienceRow(name, str(found["status"]), version, str(found["summary"]), last,
                         tokens_of_bytes(size))


def rows_file(repo: ExperienceRepository, key: str) -> Path:
    return keyed_cache_file(repo.git.common_dir, ROWS_PREFIX, key)


def _store_rows(repo: ExperienceRepository, key: str, listed: Catalog) -> None:
    path = rows_file(repo, key)
    write_cache(path, FORMAT, {
        "key": key, "commit": listed.commit, "snapshot_id": listed.snapshot_id,
        "rows": [list(row.as_dict().values()) for row in listed.rows]})
    for other in path.parent.glob(f"{ROWS_PREFIX}*.json"):  # one commit's rows are kept
        if other != path:
            with contextlib.suppress(OSError):
                other.unlink()


def _stored_rows(repo: ExperienceRepository, key: str) -> Catalog | None:
    entries = read_cache(rows_file(repo, key), FORMAT)
    if entries is None or entries.get("key") != key:
        return None
    try:
        return Catalog(str(entries["commit"]), str(entries["snapshot_id"]),
                       [ExperienceRow(*row) for row in entries["rows"]])
    except (KeyError, TypeError):
        return None


def catalog(repo: ExperienceRepository, rev: str | None = None) -> Catalog:
    """The rows of ``expgit list`` for ``main`` (or ``rev``), sorted by name."""
    commit = repo.commit(rev) if rev else repo.main_commit()
    key = f"{commit} {repo.settings.token_budget} {repo.root} {repo.settings.layout}"
    stored = _stored_rows(repo, key)
    if stored is not None:
        return stored
    listed = _catalog(repo, commit)
    _store_rows(repo, key, listed)
    return listed


def _catalog(repo: ExperienceRepository, commit: str) -> Catalog:
    loader = repo.snapshots
    root, files = loader.files_at(commit)
    versions = loader.versions(commit)
    path = cache_file(repo.git.common_dir, CACHE_NAME)
    cached = read_cache(path, FORMAT) or {}
    missing = [blob for _, blob in files.values() if blob not in cached]
    fresh: dict[str, dict[str, Any]] = {}
    failed: dict[str, tuple[int, str]] = {}  # blob -> (size, problem); never cached
    if missing:
        paths = {blob: file_path for file_path, blob in files.values()}
        for blob, data in repo.git.read_blobs(missing).items():
            try:
                fresh[blob] = _parsed(data, paths[blob])
            except InvalidInputError as exc:
                failed[blob] = (len(data), exc.message)
    rows: list[ExperienceRow] = []
    budget = repo.settings.token_budget
    for name in sorted(files):
        file_path, blob = files[name]
        info = versions.get(file_path)
        version, last = (info.version, info.last_commit) if info else (0, None)
        found = cached.get(blob) or fresh.get(blob)
        rows.append(_row(name, file_path, found, version, last, budget) if found is not None
                    else _invalid(name, version, last, *failed[blob]))
    # rewriting the file costs about as much as parsing a few hundred files: a handful of
    # new ones (an edit or two since the last listing) wait until there are more
    if fresh and (len(fresh) >= REWRITE_AFTER or len(fresh) * 50 >= len(cached)):
        kept = {blob: cached[blob] for _, blob in files.values() if blob in cached}
        kept |= fresh
        for blob, value in cached.items():
            if len(kept) >= KEEP:
                break
            kept.setdefault(blob, value)
        write_cache(path, FORMAT, kept)
    return Catalog(commit, root, rows)
