"""One training or eval run, wired together: the components from ``expgit.toml`` and the
command line's choices, over a cases file or an environment service (the composition root
that ``expgit train``/``eval``, the sessions hub, ``expgit learn`` and the services use).

May import: expgit.errors, expgit.resources, expgit.core, expgit.git, expgit.store,
expgit.hooks, expgit.llm, expgit.asgi, expgit.retrieval, expgit.train, expgit.outcomes
and expgit.remote (the layers below it).
"""
