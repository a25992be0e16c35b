"""The review workflow: gradients, proposals, apply to main by compare-and-swap,
review, revert, history, pull requests and the push of expgit's refs.

May import: expgit.core, expgit.git, expgit.store's root modules,
expgit.store.format and expgit.store.derived.
"""
