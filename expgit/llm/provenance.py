"""The provenance of an LLM runtime's calls (:class:`expgit.store.format.provenance.Provenance`):
the endpoint as a scheme-less ``host[:port]`` and the embedded model's file hash.

The hash of a GGUF file (hundreds of megabytes to gigabytes) is computed once: kept by
the file's path, size and modification time in this process, and for the next process
in a derived index (:mod:`expgit.store.derived.cache`) in the user's cache folder,
``$XDG_CACHE_HOME/expgit/index.sqlite3`` (``~/.cache`` by default; a model file is no
git object). A file whose size or time changed is hashed again; an index that cannot be
read or written costs only the hashing.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from expgit.store.derived.cache import INDEX_NAME, DerivedIndex, derive_file

DEFAULT_HOST = "api.openai.com"
EMBEDDED = "embedded"
LOCAL_DESCRIPTION_PREFIX = "local "  # how the embedded model's runtime describes itself
TABLE = "gguf_sha256"
DDL = """CREATE TABLE gguf_sha256 (
    path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL) WITHOUT ROWID"""

_memo: dict[tuple[str, int, int], str] = {}
_lock = threading.Lock()


def display_url(url: str) -> str:
    """``url`` as it may be shown or recorded: without its userinfo
    (``http://user:key@host/v1`` -> ``http://host/v1``), as git and pip keep a URL's
    credentials out of what they print. Every place that prints, reports or records an
    endpoint uses this."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def endpoint_host(base_url: str | None) -> str:
    """``https://user:key@llm.example.com:8443/v1?x=1`` -> ``llm.example.com:8443``; no
    URL: the OpenAI API's host."""
    if not base_url:
        return DEFAULT_HOST
    parts = urlsplit(base_url if "//" in base_url else f"//{base_url}")
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return (f"{host}:{port}" if port else host) or "unknown"


def cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "expgit" / INDEX_NAME


def hash_file(path: Path) -> str:
    with path.open("rb") as data:
        return hashlib.file_digest(data, "sha256").hexdigest()


def gguf_sha256(path: Path, cache: Path | None = None) -> str:
    """The sha256 of the model file ``path``, hashed only when no cache knows it at its
    current size and modification time (``cache``: the index file, by default
    :func:`cache_file`)."""
    resolved = path.resolve()
    stat = resolved.stat()
    key = (str(resolved), stat.st_size, stat.st_mtime_ns)
    with _lock:
        if key not in _memo:
            _memo[key] = derive_file(cache or cache_file(), lambda ix: _hashed(ix, key))
        return _memo[key]


def _hashed(ix: DerivedIndex, key: tuple[str, int, int]) -> str:
    ix.table(TABLE, 1, DDL)
    row = ix.db.execute("SELECT sha256 FROM gguf_sha256 WHERE path = ? AND size = ? AND "
                        "mtime_ns = ?", key).fetchone()
    if row is not None:
        return str(row[0])
    sha = hash_file(Path(key[0]))
    ix.update(lambda db: db.execute("INSERT OR REPLACE INTO gguf_sha256 VALUES (?, ?, ?, ?)",
                                    (*key, sha)))
    return sha
