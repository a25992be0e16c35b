"""A fake ``skill-scanner`` command (Cisco's skill-scanner's command line: ``scan-all DIR
... --output-json FILE``), put on PATH by a test: it records its arguments in
``argv.json`` beside it and reports a HIGH finding for every skill whose SKILL.md holds
:data:`MARKER` (a LOW one for every skill)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

MARKER = "fare-override-marker"  # what the fake scanner reports

FAKE_SCANNER = f"""#!{sys.executable}
import json, pathlib, sys
args = sys.argv[1:]
pathlib.Path(__file__).with_name("argv.json").write_text(json.dumps(args))
assert args[0] == "scan-all", args
skills = pathlib.Path(args[1])
results = []
for skill in sorted(skills.iterdir()):
    text = (skill / "SKILL.md").read_text()
    findings = [{{"rule_id": "FAKE_PROMPT_INJECTION", "severity": "HIGH",
                  "title": "Instruction hidden in skill\\x1b]8;;x\\x07",
                  "file_path": "SKILL.md"}}] if "{MARKER}" in text else []
    findings.append({{"rule_id": "FAKE_STYLE", "severity": "LOW", "title": "style"}})
    results.append({{"skill_name": skill.name, "skill_path": str(skill),
                     "findings": findings}})
out = pathlib.Path(args[args.index("--output-json") + 1])
out.write_text(json.dumps({{"summary": {{}}, "results": results}}))
sys.exit(1 if any(f["severity"] == "HIGH" for r in results for f in r["findings"]) else 0)
"""


def fake_scanner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "skill-scanner"
    script.write_text(FAKE_SCANNER)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder
