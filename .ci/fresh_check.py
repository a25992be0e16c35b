"""Tell whether this interpreter could hide a test that escapes the virtual environment.

A test or hook that starts an interpreter by a path outside the environment (a symlink
to the venv's python, the base interpreter) runs without the environment's packages. On
a fresh machine that fails; where the base interpreter already has the project's
dependencies it passes by accident. Run with the interpreter CI starts with, before the
virtual environment: prints the dependencies it can import (one line, space-separated)
and nothing when it can import none of them. Standard library only.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path

# distributions whose import name is not their name with "-" as "_"; None: nothing to import
IMPORT_NAMES: dict[str, str | None] = {
    "gitpython": "git",
    "pyyaml": "yaml",
    "llama-cpp-python": "llama_cpp",
    "types-pyyaml": None,
    "types-regex": None,
}


def import_name(requirement: str) -> str | None:
    dist = re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower()
    return IMPORT_NAMES.get(dist, dist.replace("-", "_"))


def main() -> int:
    project = tomllib.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements.extend(extra)
    names = {name for name in map(import_name, requirements) if name}
    print(" ".join(sorted(n for n in names if importlib.util.find_spec(n) is not None)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
