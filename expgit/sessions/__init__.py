"""The session hub (issue 5): production agents' ``.jsonl`` conversations turned into
training data, with state kept in git.

Stateless parts: :mod:`~expgit.sessions.formats.parse` (parsing and normalising the five row
shapes), :mod:`~expgit.sessions.fingerprint`, :mod:`~expgit.core.redaction.text`,
:mod:`~expgit.sessions.metrics` (the trajectory scorer), :mod:`~expgit.sessions.sft`
(chat fine-tuning examples) and :mod:`~expgit.sessions.export`; where the tools keep
their sessions: :mod:`~expgit.sessions.ingest.discovery`.

May import: expgit.errors, expgit.resources, expgit.core, expgit.git, expgit.store,
expgit.hooks, expgit.llm, expgit.asgi, expgit.retrieval, expgit.train, expgit.outcomes,
expgit.remote and expgit.runs (the layers below it). The session store and manifests sit
at the root; the sub-packages import each other in the order formats < status < ingest
(SUBLAYERS in tests/test_architecture.py).
"""
