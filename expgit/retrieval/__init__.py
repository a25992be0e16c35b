"""What an agent reads for one request: the bounded, relevant context, the relevance
ranking and its BM25 index, the skill listing, and which experiences a rollout used.
It serves `expgit context`, `expgit mcp`, `expgit env serve` and the executors.

May import: expgit.core, expgit.git, expgit.store, expgit.hooks, expgit.llm.
"""
