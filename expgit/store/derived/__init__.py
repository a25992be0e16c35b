"""Derived data: what is computed from history and may be kept to save recomputing
it (snapshots and their versions, the catalog, the applied index, predictions).
Delete any of it and the next command rebuilds it.

May import: expgit.core, expgit.git, expgit.store's root modules and
expgit.store.format.
"""
