"""The user's settings that decide git's automatic maintenance (:mod:`expgit.git.maintenance`),
read as git reads them: ``gc.auto``, ``gc.autoDetach``, ``gc.autoPackLimit``,
``maintenance.auto``, ``maintenance.loose-objects.auto``, ``core.commitGraph`` and
``gc.writeCommitGraph``."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass

GC_AUTO_DEFAULT = 6700
LOOSE_AUTO_DEFAULT = 100  # git's maintenance.loose-objects.auto
PACK_LIMIT_DEFAULT = 50  # git's gc.autoPackLimit

_TRUE = ("true", "yes", "on", "1", "")
_FALSE = ("false", "no", "off", "0")
_CONFIG_KEYS = ("gc.auto", "gc.autodetach", "maintenance.auto", "core.commitgraph",
                "gc.writecommitgraph", "maintenance.loose-objects.auto", "gc.autopacklimit")

Runner = Callable[..., "subprocess.CompletedProcess[bytes]"]


@dataclass(frozen=True)
class Settings:
    """The user's settings that decide git's automatic maintenance."""

    gc_auto: int = GC_AUTO_DEFAULT
    enabled: bool = True  # maintenance.auto
    detach: bool = True  # gc.autoDetach
    commit_graph: bool = True  # core.commitGraph and gc.writeCommitGraph
    loose_auto: int = LOOSE_AUTO_DEFAULT  # maintenance.loose-objects.auto (0: never)
    pack_limit: int = PACK_LIMIT_DEFAULT  # gc.autoPackLimit (0: packs never consolidated)

    @property
    def threshold(self) -> int:
        """How many loose objects in ``objects/17`` git lets pass before it packs."""
        return (self.gc_auto + 255) // 256


def _bool(value: str, default: bool) -> bool:
    low = value.strip().lower()
    return True if low in _TRUE else False if low in _FALSE else default


def _int(value: str, default: int) -> int:
    text = value.strip().lower()
    scale = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}.get(text[-1:], 1)
    try:
        return int(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        return default


def parse_settings(config: str) -> Settings:
    """:class:`Settings` from ``git config -z --get-regexp`` output (last value wins)."""
    values: dict[str, str] = {}
    for item in config.split("\0"):
        key, _, value = item.partition("\n")
        if key:
            values[key.lower()] = value
    return Settings(
        gc_auto=max(0, _int(values.get("gc.auto", ""), GC_AUTO_DEFAULT)),
        enabled=_bool(values.get("maintenance.auto", "true"), True),
        detach=_bool(values.get("gc.autodetach", "true"), True),
        commit_graph=(_bool(values.get("core.commitgraph", "true"), True)
                      and _bool(values.get("gc.writecommitgraph", "true"), True)),
        loose_auto=max(0, _int(values.get("maintenance.loose-objects.auto", ""),
                               LOOSE_AUTO_DEFAULT)),
        pack_limit=max(0, _int(values.get("gc.autopacklimit", ""), PACK_LIMIT_DEFAULT)))


def read_settings(run: Runner) -> Settings:
    pattern = "^(" + "|".join(k.replace(".", r"\.") for k in _CONFIG_KEYS) + ")$"
    proc = run("config", "-z", "--get-regexp", pattern, check=False)
    return parse_settings(proc.stdout.decode(errors="replace") if proc.returncode == 0 else "")
