"""git's formats and processes: the repository wrapper, refs and their transactions, objects,
worktrees and maintenance; the only user of GitPython.

May import: expgit.errors, expgit.resources and expgit.core (the layers below it).
"""
