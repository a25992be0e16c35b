"""Tool environments for multi-turn rollouts: the Protocol, a registry, the airline example.

May import: the layers below expgit.train and expgit.train's root modules; its registry
and binding also expgit.train.tau2.
"""
