"""The guards of a model's edit: the lesson checks, the cosmetic-edit test and the
degeneracy guard.

May import: the layers below expgit.train and expgit.train's root modules; no other
sub-package of expgit.train.
"""
