"""The session hub (issue 5): production agents' ``.jsonl`` conversations turned into
training data, with state kept in git.

Stateless parts: :mod:`~expgit.sessions.formats` (parsing and normalising the five row
shapes), :mod:`~expgit.sessions.fingerprint`, :mod:`~expgit.store.redact`,
:mod:`~expgit.sessions.metrics` (the trajectory scorer), :mod:`~expgit.sessions.sft`
(chat fine-tuning examples) and :mod:`~expgit.sessions.export`; where the tools keep
their sessions: :mod:`~expgit.sessions.discovery`.
"""
