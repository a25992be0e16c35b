"""Implementations of the training Protocols, one component per module."""
