"""Derived data kept in the git directory: files that save recomputing what the git
objects already say, under ``<git-common-dir>/expgit/cache/``.

Every entry is keyed by an object id (a blob's or a commit's), so it cannot disagree with
the objects it was computed from; it is only ever used *instead of* computing the same
answer again, never over what the objects hold. A file that is missing, unreadable,
corrupt or of another format (``fmt``: a new expgit that parses differently) is ignored
and written anew. Delete the folder at any time: the next command recomputes it.

Writes are atomic (a temporary file renamed into place; two writers both leave a whole
file) and never fail a command: a read-only git directory simply goes without.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

CACHE_DIR = Path("expgit") / "cache"


def cache_file(common_dir: Path, name: str) -> Path:
    return common_dir / CACHE_DIR / name


def keyed_cache_file(common_dir: Path, prefix: str, key: str) -> Path:
    """``<prefix><digest of key>.json``: one file per key, so a reader of another key
    never opens it."""
    return cache_file(common_dir, f"{prefix}{hashlib.sha1(key.encode()).hexdigest()[:16]}.json")


def read_cache(path: Path, fmt: str) -> dict[str, Any] | None:
    """The entries of the cache file at ``path``, or None if there is none of ``fmt``."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != fmt:
        return None
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else None


def write_cache(path: Path, fmt: str, entries: dict[str, Any]) -> None:
    """Replace the cache file at ``path`` with ``entries``; on any failure, leave it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # dumps, not dump: only the one-shot encoder is the C one (10x faster here)
        text = json.dumps({"format": fmt, "entries": entries}, separators=(",", ":"))
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
