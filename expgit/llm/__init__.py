"""The LLM port: chat models, structured output, usage accounting.

May import: expgit.errors, expgit.resources, expgit.core, expgit.git, expgit.store and
expgit.hooks (the layers below it).
"""
