"""The training pipeline: rollouts -> trajectories -> gradients -> patch merge -> apply.

May import: expgit.errors, expgit.resources, expgit.core, expgit.git, expgit.store,
expgit.hooks, expgit.llm, expgit.asgi and expgit.retrieval (the layers below it). The
pipeline, its engine and contracts sit at the root; the sub-packages import each other
in the order guards < records < measurement < tools < tau2 < components < reports
(SUBLAYERS in tests/test_architecture.py).
"""
