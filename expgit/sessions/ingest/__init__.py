"""`expgit sessions ingest`: discovery of session files, parsing, segmentation,
incremental re-segmentation, invalidation and the ingest report.

May import: the layers below expgit.sessions, expgit.sessions' root modules,
expgit.sessions.formats and expgit.sessions.status.
"""
