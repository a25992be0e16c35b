"""expgit: an LLM agent's experiences, kept and trained in git.

``from expgit import ExperienceRepository`` works as before, but importing ``expgit`` (or
any of its modules) no longer loads the store: each name is imported when first used.

May import: every package (it is the top; its names load lazily).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["ExperienceRepository", "ExpgitError"]

if TYPE_CHECKING:
    from expgit.errors import ExpgitError
    from expgit.store.repository import ExperienceRepository


def __getattr__(name: str) -> Any:
    if name == "ExpgitError":
        from expgit.errors import ExpgitError

        return ExpgitError
    if name == "ExperienceRepository":
        from expgit.store.repository import ExperienceRepository

        return ExperienceRepository
    raise AttributeError(f"module 'expgit' has no attribute {name!r}")
