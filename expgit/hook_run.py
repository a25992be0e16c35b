"""Hook stubs installed before the layered layout run ``python -m expgit.hook_run``.

They keep working: this runs :mod:`expgit.hooks.run`, which new stubs call directly.
``expgit hooks install`` rewrites an old stub.
"""

from __future__ import annotations

import sys

from expgit.hooks.run import main

if __name__ == "__main__":
    sys.exit(main())
