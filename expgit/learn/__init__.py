"""Offline learning from recorded rollouts (``expgit learn``): metrics, findings and an
experience seed pack, written as a report; with ``--propose``, a reviewable proposal.

* :mod:`expgit.learn.runs` — rollouts and outcome records read into per-run views;
* :mod:`expgit.learn.metrics` — ``metrics.json``;
* :mod:`expgit.learn.findings` — ``findings.json`` (rules, stable ids, capped evidence);
* :mod:`expgit.learn.seed_pack` — ``experience_seed_pack.json`` (deterministic, no LLM);
* :mod:`expgit.learn.propose` — the seed pack and findings as gradients and a proposal;
* :mod:`expgit.learn.report` — the whole run, files written atomically.

May import: expgit.errors, expgit.resources, expgit.core, expgit.git, expgit.store,
expgit.hooks, expgit.llm, expgit.asgi, expgit.retrieval, expgit.train, expgit.outcomes,
expgit.remote and expgit.runs (the layers below it).
"""
