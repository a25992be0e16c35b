"""What a run and a reviewer read: the run report, the verdict and the evidence behind
an edit.

May import: the layers below expgit.train, expgit.train's root modules and every
other sub-package of expgit.train.
"""
