"""Implementations of the training Protocols, one component per module.

May import: the layers below expgit.train, expgit.train's root modules, guards, records,
measurement, tools and tau2.
"""
