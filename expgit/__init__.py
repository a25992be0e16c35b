"""expgit: an LLM agent's experiences, kept and trained in git."""

from expgit.errors import ExpgitError
from expgit.store.repository import ExperienceRepository

__all__ = ["ExperienceRepository", "ExpgitError"]
__version__ = "0.1.0"
