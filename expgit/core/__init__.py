"""The shared vocabulary of every layer: the training domain (Message, Case, Rollout,
SemanticGradient ...), the criterion checks, the bounded JSON reader and redaction.

May import: expgit.errors and expgit.resources only (docs/design.md, "Layout").
"""
