"""expgit's HTTP services: the training service (``expgit serve``) and the example
environment service (``expgit env serve``), built on :mod:`expgit.asgi`.

May import: expgit.errors, expgit.resources, expgit.core, expgit.git, expgit.store,
expgit.hooks, expgit.llm, expgit.asgi, expgit.retrieval, expgit.train, expgit.outcomes,
expgit.remote, expgit.runs, expgit.sessions, expgit.learn, expgit.init and expgit.status
(the layers below it).
"""
