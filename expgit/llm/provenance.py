"""The provenance of an LLM runtime's calls (:class:`expgit.store.provenance.Provenance`):
the endpoint as a scheme-less ``host[:port]`` and the embedded model's file hash.

The hash of a GGUF file (hundreds of megabytes to gigabytes) is computed once: kept by
the file's path, size and modification time in this process, and in
``$XDG_CACHE_HOME/expgit/gguf-sha256.json`` (``~/.cache`` by default) for the next
process. A file whose size or time changed is hashed again; a cache that cannot be read
or written costs only the hashing.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DEFAULT_HOST = "api.openai.com"
EMBEDDED = "embedded"
LOCAL_DESCRIPTION_PREFIX = "local "  # how the embedded model's runtime describes itself
CACHE_NAME = "gguf-sha256.json"
_CHUNK = 1 << 20

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
    return Path(root) / "expgit" / CACHE_NAME


def _read_cache(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _write_cache(path: Path, entries: dict[str, str]) -> None:
    """Atomically (a temporary file renamed over it): never half-written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".gguf-sha256.")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(entries, out, indent=0, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        return


def hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def gguf_sha256(path: Path, cache: Path | None = None) -> str:
    """The sha256 of the model file ``path``, hashed only when no cache knows it at its
    current size and modification time."""
    resolved = path.resolve()
    stat = resolved.stat()
    key = (str(resolved), stat.st_size, stat.st_mtime_ns)
    with _lock:
        if key in _memo:
            return _memo[key]
        where = cache if cache is not None else cache_file()
        entries = _read_cache(where)
        text_key = f"{key[0]}|{key[1]}|{key[2]}"
        sha = entries.get(text_key)
        if sha is None or len(sha) != 64:
            sha = hash_file(resolved)
            entries = {k: v for k, v in entries.items() if not k.startswith(f"{key[0]}|")}
            entries[text_key] = sha
            _write_cache(where, entries)
        _memo[key] = sha
        return sha
