"""The ref namespaces expgit uses; an object's state is the namespace its ref is in.

* ``refs/heads/expgit/gradients/<id>``, ``refs/heads/expgit/proposals/<id>``: open, as
  branches so any git client can check them out and review them;
* ``refs/expgit/{applied,rejected}/{gradients,proposals}/<id>``: closed, kept reachable so
  the audit trail (``expgit log``) can still show them; not branches, so they stay out of
  ``git branch``;
* ``refs/notes/expgit``: reasons given for rejections, as git notes on the commits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from expgit.errors import InvalidInputError, NotFoundError

if TYPE_CHECKING:
    from expgit.store.repository import ExperienceRepository

ID_LEN = 12
GRADIENTS = "refs/heads/expgit/gradients/"
PROPOSALS = "refs/heads/expgit/proposals/"
NOTES_REF = "refs/notes/expgit"


def _states(kind: str, open_prefix: str) -> dict[str, str]:
    return {"open": open_prefix, "applied": f"refs/expgit/applied/{kind}/",
            "rejected": f"refs/expgit/rejected/{kind}/"}


GRADIENT_STATES = _states("gradients", GRADIENTS)
PROPOSAL_STATES = _states("proposals", PROPOSALS)


def kept_commits(repo: ExperienceRepository, states: dict[str, str]) -> dict[str, str]:
    """``{commit: location}`` of every ref in ``states``' namespaces, each commit once: a
    crash between namespaces may leave two refs of one object, and the open one wins."""
    seen: dict[str, str] = {}
    for location in ("open", "rejected", "applied"):
        for sha in repo.git.refs(states[location]).values():
            seen.setdefault(sha, location)
    return seen


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
