"""`expgit sessions status` and skill usage: counts from the manifests and the ledger
and checkpoint that keep them.

May import: the layers below expgit.sessions, expgit.sessions' root modules and
expgit.sessions.formats.
"""
