"""One rollout's copy of the tau2 database, cheap to make: the tables read through to the
shared parsed database, and a record is deep-copied the first time a tool asks for it by
key (then that copy is the rollout's own). A tau2 airline tool reaches every record it
changes by key (``db["reservations"][rid]``), and iterates a table only to read (the
flight searches), so the shared database is never changed; tests replay every task's
gold actions and check that it is not.

Two overlays over the same database are equal databases iff their :meth:`changes` are
equal: that is how the scorer compares the rollout's database with the gold one
(tau2 compares hashes of the two whole databases: docs/tau2.md).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from expgit.train.tau2.data import STATE_KEY, tool_content, tool_functions
from expgit.train.tools.environment import ToolError


class OverlayTable(MutableMapping[str, Any]):
    """A table of the shared database with this rollout's own copies on top."""

    def __init__(self, base: Mapping[str, Any]) -> None:
        self._base = base
        self.own: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key in self.own:
            return self.own[key]
        mine = self.own[key] = copy.deepcopy(self._base[key])  # KeyError if absent
        return mine

    def __setitem__(self, key: str, value: Any) -> None:
        self.own[key] = value

    def __delitem__(self, key: str) -> None:
        raise TypeError("a tau2 tool never deletes a record")

    def __contains__(self, key: object) -> bool:
        return key in self.own or key in self._base

    def __iter__(self) -> Iterator[str]:
        yield from self._base
        yield from (key for key in self.own if key not in self._base)

    def __len__(self) -> int:
        return len(self._base) + sum(1 for key in self.own if key not in self._base)

    def values(self) -> list[Any]:  # type: ignore[override]
        """Read-only: the shared records are not copied (a search reads them all)."""
        return [self.own[k] if k in self.own else self._base[k] for k in self]

    def items(self) -> list[tuple[str, Any]]:  # type: ignore[override]
        return [(k, self.own[k] if k in self.own else self._base[k]) for k in self]

    def changes(self) -> dict[str, Any]:
        """This rollout's records that differ from the shared ones (or are new)."""
        return {key: value for key, value in self.own.items()
                if key not in self._base or self._base[key] != value}


class OverlayDB(dict[str, Any]):
    """The database a tool function sees: ``{table: OverlayTable}``."""

    def __init__(self, base: Mapping[str, Any]) -> None:
        super().__init__({name: OverlayTable(table) for name, table in base.items()})

    def changes(self) -> dict[str, dict[str, Any]]:
        """``{table: {key: record}}`` of every changed or new record; {} if none."""
        out = {}
        for name, table in self.items():
            changed = table.changes()
            if changed:
                out[name] = changed
        return out

    def run(self, name: str, arguments: Mapping[str, Any]) -> str:
        """The tool's result text; ToolError with its message if it refuses the call (as
        tau2 answers ``Error: ...``) or the tool is unknown."""
        found = tool_functions().get(name)
        if found is None:
            raise ToolError(f"Tool '{name}' not found.")
        function, takes_db = found
        args = {k: v for k, v in arguments.items() if k != STATE_KEY}
        try:
            result = function(self, **args) if takes_db else function(**args)
        except Exception as exc:  # the tool's refusal is the agent's to read
            raise ToolError(str(exc) or type(exc).__name__) from None
        return tool_content(result)
