"""ContentHashPolicySnapshotter: a policy snapshot's id is its content hash."""

from __future__ import annotations

from expgit.train.interfaces import ExperienceSet


class ContentHashPolicySnapshotter:
    """The snapshot id is the git tree id of the experiences root (the core Snapshot's
    ``id``): equal for equal content whatever the commit, different otherwise."""

    def snapshot(self, policy_set: ExperienceSet) -> str:
        return policy_set.id
