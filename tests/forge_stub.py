"""Stand-ins for the forges' CLIs (``gh``, ``glab``) on ``PATH``: no network, ever.

Each stub appends one JSON line to ``$FORGE_STUB_RECORD``: which CLI ran, its arguments,
its working directory, its standard input, and the content of the file ``--body-file``
names. It prints a made-up pull request URL; with ``FORGE_STUB_FAIL`` set it fails
instead, as a forge refusing the request would.

``gh api`` and ``glab api`` keep comments in ``$FORGE_STUB_RECORD.comments.json``: a GET
of a ``.../comments`` or ``.../notes`` list prints that thread's comments as JSON, a POST
to it adds one (``--field body=@FILE``), a PATCH or PUT of ``.../ID`` replaces one's body.
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
if argv[:1] == ["api"]:
    api(argv[1:])
    sys.exit(0)
print({url!r})
'''
# `gh api` / `glab api` on a comment thread (no braces to escape: not formatted)
API = '''
def api(args):
    state = os.environ["FORGE_STUB_RECORD"] + ".comments.json"
    threads = json.load(open(state)) if os.path.exists(state) else {}
    method = args[args.index("--method") + 1] if "--method" in args else "GET"
    body = None
    if "--field" in args:
        value = args[args.index("--field") + 1].split("=", 1)[1]
        body = open(value[1:], encoding="utf-8").read() if value.startswith("@") else value
    values = {args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--method", "--field")}
    endpoint = next(a for a in args if not a.startswith("-") and a not in values)
    if method == "GET":
        print(json.dumps(threads.get(endpoint, [])))
    elif method == "POST":
        count = sum(map(len, threads.values()))
        threads.setdefault(endpoint, []).append({"id": 1000 + count, "body": body})
    else:
        number = endpoint.rpartition("/")[2]
        for thread in threads.values():
            for comment in thread:
                if str(comment["id"]) == number:
                    comment["body"] = body
    json.dump(threads, open(state, "w"))
'''

URLS = {"gh": "https://github.com/example/experiences/pull/7",
        "glab": "https://gitlab.example.com/group/experiences/-/merge_requests/7"}


def install_stubs(folder: Path, *clis: str) -> Path:
    """Write the stubs of ``clis`` (default: gh and glab) into ``folder``; the record file."""
    folder.mkdir(parents=True, exist_ok=True)
    for cli in clis or tuple(URLS):
        path = folder / cli
        shebang, imports, rest = STUB.format(python=sys.executable, cli=cli,
                                             url=URLS[cli]).split("\n", 2)
        path.write_text("\n".join([shebang, imports, API, rest]))
        path.chmod(0o755)
    return folder / "record.jsonl"


def comments(record: Path) -> dict[str, list[dict[str, Any]]]:
    """The comments ``gh api`` / ``glab api`` keep, by thread (its endpoint)."""
    state = Path(f"{record}.comments.json")
    return json.loads(state.read_text()) if state.exists() else {}


def records(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


def stub_env(folder: Path, record: Path, path: str | None = None) -> dict[str, str]:
    """``PATH`` with the stubs first, and the record file."""
    return {"PATH": os.pathsep.join([str(folder), path or os.environ.get("PATH", "")]),
            "FORGE_STUB_RECORD": str(record)}
