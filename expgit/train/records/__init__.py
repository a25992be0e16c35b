"""What training keeps: trajectories on their own branch and the transcripts beside
them.

May import: the layers below expgit.train, expgit.train's root modules and
expgit.train.guards.
"""
