"""What a run measures: the candidate against its baseline, phase metrics, skill evals
and reach, the predictions' check and an experience's track record.

May import: the layers below expgit.train, expgit.train's root modules,
expgit.train.guards and expgit.train.records.
"""
