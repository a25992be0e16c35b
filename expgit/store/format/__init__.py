"""The files of an experience repository and what they say: experience files and
SKILL.md, front matter, YAML, the tree layout and its moves, commit trailers,
expgit.toml, templates, AGENTS.md's always-on block, and the checks of them.

May import: expgit.core, expgit.git, expgit.resources and expgit.store's root
modules; no other sub-package of expgit.store.
"""
