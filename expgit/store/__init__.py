"""An experience repository in git. The repository, its lock and its side branches sit at the
root; format/, derived/ and workflow/ hold the rest (docs/design.md, "Layout").

May import: expgit.errors, expgit.resources, expgit.core and expgit.git (the layers
below it). Its sub-packages import each other in the order format < derived < workflow
(SUBLAYERS in tests/test_architecture.py).
"""
