"""Outcomes: what production says about the agent's work, as analytics-only records.

* :mod:`expgit.outcomes.feedback` — the rule-based feedback outcome evaluator (thumbs,
  ratings, re-asks, silence -> a label per response -> a RubricEvaluation);
* :mod:`expgit.outcomes.records` / :mod:`expgit.outcomes.store` — typed outcome records
  (a verdict on a rollout, trajectory, experience or proposal), append-only on the
  ``[outcomes] branch``;
* :mod:`expgit.outcomes.api` — ``POST/GET /v1/outcomes`` for ``expgit serve``.

Outcomes never reach ``main`` and never appear in an agent-facing response.

May import: expgit.errors, expgit.resources, expgit.core, expgit.git, expgit.store,
expgit.hooks, expgit.llm, expgit.asgi, expgit.retrieval and expgit.train (the layers
below it).
"""
