"""The remote benchmark protocol: its models, the clients of an environment service, and
the SDK that makes any Python environment one.

May import: expgit.errors, expgit.resources, expgit.core, expgit.git, expgit.store,
expgit.hooks, expgit.llm, expgit.asgi, expgit.retrieval, expgit.train and
expgit.outcomes (the layers below it).
"""
