"""Stand-ins for the forges' CLIs (``gh``, ``glab``) on ``PATH``: no network, ever.

Each stub appends one JSON line to ``$FORGE_STUB_RECORD``: which CLI ran, its arguments,
its working directory, its standard input, and the content of the file ``--body-file``
names. It prints a made-up pull request URL; with ``FORGE_STUB_FAIL`` set it fails
instead, as a forge refusing the request would.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

STUB = '''#!{python}
import json, os, sys
argv = sys.argv[1:]
stdin = sys.stdin.read() if not sys.stdin.isatty() else ""
body_file = None
if "--body-file" in argv:
    name = argv[argv.index("--body-file") + 1]
    body_file = stdin if name == "-" else open(name, encoding="utf-8").read()
with open(os.environ["FORGE_STUB_RECORD"], "a", encoding="utf-8") as out:
    out.write(json.dumps({{"cli": {cli!r}, "argv": argv, "cwd": os.getcwd(),
                          "stdin": stdin, "body_file": body_file}}) + "\\n")
if os.environ.get("FORGE_STUB_FAIL"):
    print("GraphQL: the forge refused the pull request", file=sys.stderr)
    sys.exit(1)
print({url!r})
'''

URLS = {"gh": "https://github.com/example/experiences/pull/7",
        "glab": "https://gitlab.example.com/group/experiences/-/merge_requests/7"}


def install_stubs(folder: Path, *clis: str) -> Path:
    """Write the stubs of ``clis`` (default: gh and glab) into ``folder``; the record file."""
    folder.mkdir(parents=True, exist_ok=True)
    for cli in clis or tuple(URLS):
        path = folder / cli
        path.write_text(STUB.format(python=sys.executable, cli=cli, url=URLS[cli]))
        path.chmod(0o755)
    return folder / "record.jsonl"


def records(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


def stub_env(folder: Path, record: Path, path: str | None = None) -> dict[str, str]:
    """``PATH`` with the stubs first, and the record file."""
    return {"PATH": os.pathsep.join([str(folder), path or os.environ.get("PATH", "")]),
            "FORGE_STUB_RECORD": str(record)}
