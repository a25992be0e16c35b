"""The installed git hook stubs and the checks they run.

May import: expgit.errors, expgit.resources, expgit.core, expgit.git and expgit.store
(the layers below it).
"""
