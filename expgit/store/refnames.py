"""The ref namespaces expgit uses; an object's state is the namespace its ref is in.

* ``refs/heads/expgit/gradients/<id>``, ``refs/heads/expgit/proposals/<id>``: open, as
  branches so any git client can check them out and review them;
* ``refs/expgit/{applied,rejected}/{gradients,proposals}/<id>``: closed, kept reachable so
  the audit trail (``expgit log``) can still show them; not branches, so they stay out of
  ``git branch``;
* ``refs/notes/expgit``: reasons given for rejections, as git notes on the commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from expgit.errors import InvalidInputError, NotFoundError
from expgit.store.format.settings import GRADIENT_BRANCHES, PROPOSAL_BRANCHES

if TYPE_CHECKING:
    from expgit.store.repository import ExperienceRepository

ID_LEN = 12
GRADIENTS = f"refs/heads/{GRADIENT_BRANCHES}/"
PROPOSALS = f"refs/heads/{PROPOSAL_BRANCHES}/"
NOTES_REF = "refs/notes/expgit"


def _states(kind: str, open_prefix: str) -> dict[str, str]:
    return {"open": open_prefix, "applied": f"refs/expgit/applied/{kind}/",
            "rejected": f"refs/expgit/rejected/{kind}/"}


GRADIENT_STATES = _states("gradients", GRADIENTS)
PROPOSAL_STATES = _states("proposals", PROPOSALS)


class NotMadeByExpgit(InvalidInputError):
    """A commit in expgit's namespaces that expgit did not make (an ordinary commit
    pushed there, say); ``reason`` says what gave it away."""

    def __init__(self, commit: str, what: str, reason: str) -> None:
        super().__init__(f"commit {commit[:12]} is not an expgit {what} ({reason})",
                         hint="expgit lists it nowhere; `expgit doctor` names its ref")
        self.reason = reason


@dataclass(frozen=True)
class Stray:
    """A ref in expgit's namespaces whose commit expgit did not make: listings skip it,
    report it in one line, and ``expgit doctor`` names it."""

    ref: str
    reason: str

    @property
    def name(self) -> str:
        """The ref as a user names it: a branch without ``refs/heads/``."""
        return self.ref.removeprefix("refs/heads/")

    def as_dict(self) -> dict[str, str]:
        return {"ref": self.name, "reason": self.reason}


def describe_strays(strays: list[Stray]) -> str:
    """The one line a listing prints about the refs it skipped."""
    unique = sorted(set(strays), key=lambda s: s.ref)
    count = len(unique)
    return (f"skipped {count} branch{'es' if count != 1 else ''} expgit did not make: "
            + ", ".join(f"{s.name} ({s.reason})" for s in unique))


def kept_refs(repo: ExperienceRepository, states: dict[str, str],
              strays: list[Stray] | None = None) -> dict[str, tuple[str, str]]:
    """``{commit: (location, ref)}`` of every ref in ``states``' namespaces, each commit
    once: a crash between namespaces may leave two refs of one object, and the open one
    wins. A ref not named by its commit's id is none that expgit made: it is left out,
    and added to ``strays`` when given."""
    seen: dict[str, tuple[str, str]] = {}
    for location in ("open", "rejected", "applied"):
        prefix = states[location]
        for ref, sha in repo.git.refs(prefix).items():
            if ref[len(prefix):] != sha[:ID_LEN]:
                if strays is not None:
                    strays.append(Stray(ref, "its name is not its commit's id"))
                continue
            seen.setdefault(sha, (location, ref))
    return seen


def kept_commits(repo: ExperienceRepository, states: dict[str, str]) -> dict[str, str]:
    """``{commit: location}`` of :func:`kept_refs`."""
    return {sha: location for sha, (location, _) in kept_refs(repo, states).items()}


def find_by_id(repo: ExperienceRepository, states: dict[str, str], prefix_id: str,
               what: str, hint: str) -> tuple[str, str]:
    """(state, commit) of the object whose id starts with ``prefix_id``.

    A whole id (12 digits or more) is looked up by ref name in each state first; only when
    none is there are the namespaces listed and matched by prefix."""
    wanted = prefix_id.strip().lower()
    if len(wanted) < 4 or any(c not in "0123456789abcdef" for c in wanted):
        raise InvalidInputError(f"{prefix_id!r} is not a {what} id (at least 4 hex digits)",
                                hint=hint)
    key = wanted[:ID_LEN]
    matches: list[tuple[str, str]] = []
    if len(key) == ID_LEN:  # a whole id: its refs by name, no listing of the namespaces
        found = repo.git.refs_named(prefix + key for prefix in states.values())
        matches = [(state, found[prefix + key]) for state, prefix in states.items()
                   if prefix + key in found]
    if not matches:
        matches = [(state, sha) for state, prefix in states.items()
                   for ref, sha in repo.git.refs(prefix).items()
                   if ref[len(prefix):].startswith(key)]
    if not matches:
        raise NotFoundError(f"no {what} {prefix_id!r}", hint=hint)
    if len({sha for _, sha in matches}) > 1:
        raise InvalidInputError(f"{what} id {prefix_id!r} is ambiguous; give more digits")
    return matches[0]
