"""An external skill scanner run over the experiences: ``[skills] scanner`` in
``expgit.toml``.

``"cisco"``: Cisco AI Defense's skill-scanner (PyPI ``cisco-ai-skill-scanner``, the
``scanner`` extra: ``pip install 'expgit[scanner]'``; about 700 MB with its analyzers, so
not a default dependency). Each experience is written as a skill package
(``<name>/SKILL.md``) into a private temporary folder, and the scanner's own command runs
once over them: ``skill-scanner scan-all DIR --lenient --format json --output-json FILE``
(its core static analyzers; no LLM, no network). A finding of severity high or critical
(the scanner's own ``--fail-on-findings`` threshold) is a problem of that experience.
Configured but not installed: UsageError (exit 2) naming the install command.

The scanner is never given anything but the experiences' text; its report is read as
data, bounded, and its text escaped before anyone prints it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from expgit.errors import ExpgitError, UsageError

COMMAND = "skill-scanner"
INSTALL = "pip install 'expgit[scanner]'  (or: pip install cisco-ai-skill-scanner)"
FAILING = ("critical", "high")
TIMEOUT_SECONDS = 600.0
REPORT_BYTES = 16 * 1024 * 1024


def _printable(text: object, limit: int = 160) -> str:
    """``text`` as one line of printable characters, at most ``limit`` long."""
    line = " ".join(str(text).split())
    line = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in line)
    return line[:limit] + ("…" if len(line) > limit else "")


def scan_experiences(scanner: str, experiences: Sequence[tuple[str, str, str]]) -> list[str]:
    """The problems ``scanner`` finds in ``experiences`` (``(path, name, text)``), one per
    finding, ``"<path>: skill scanner (<scanner>): <severity> <rule>: <title>"``; [] for
    ``"none"``. UsageError when the scanner is not installed; ExpgitError when it fails."""
    if scanner == "none":
        return []
    command = shutil.which(COMMAND)
    if command is None:
        raise UsageError(f"expgit.toml sets [skills] scanner = {scanner!r}, but its command "
                         f"{COMMAND!r} is not installed",
                         hint=f"install it: {INSTALL}; or remove [skills] scanner")
    if not experiences:
        return []
    paths = {name: path for path, name, _ in experiences}
    with tempfile.TemporaryDirectory(prefix="expgit-scan-") as tmp:
        skills = Path(tmp) / "skills"
        for _, name, text in experiences:
            (skills / name).mkdir(parents=True)
            (skills / name / "SKILL.md").write_text(text, encoding="utf-8")
        report = Path(tmp) / "report.json"
        try:
            proc = subprocess.run(
                [command, "scan-all", str(skills), "--lenient", "--format", "json",
                 "--output-json", str(report)], stdin=subprocess.DEVNULL,
                capture_output=True, timeout=TIMEOUT_SECONDS, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ExpgitError(f"the skill scanner {COMMAND!r} could not run: "
                              f"{_printable(exc)}") from None
        data = _report(report, proc)
    return _problems(data, paths, scanner)


def _report(report: Path, proc: subprocess.CompletedProcess[bytes]) -> Any:
    """The scanner's JSON report (exit 0: no finding at the threshold, 1: findings)."""
    why = f"exit {proc.returncode}: {_printable(proc.stderr.decode('utf-8', 'replace')[-400:])}"
    if proc.returncode not in (0, 1) or not report.is_file():
        raise ExpgitError(f"the skill scanner {COMMAND!r} failed ({why})")
    if report.stat().st_size > REPORT_BYTES:
        raise ExpgitError(f"the skill scanner's report is over {REPORT_BYTES} bytes")
    try:
        return json.loads(report.read_text("utf-8", "replace"))
    except ValueError:
        raise ExpgitError(f"the skill scanner's report is not JSON ({why})") from None


def _problems(data: Any, paths: dict[str, str], scanner: str) -> list[str]:
    results = data.get("results", []) if isinstance(data, dict) else []
    problems: list[str] = []
    for result in results if isinstance(results, list) else []:
        if not isinstance(result, dict):
            continue
        name = Path(str(result.get("skill_path") or result.get("skill_name") or "")).name
        where = paths.get(name, _printable(result.get("skill_name", "?"), 80))
        for finding in result.get("findings") or []:
            if not isinstance(finding, dict):
                continue
            severity = str(finding.get("severity", "")).lower()
            if severity not in FAILING:
                continue
            problems.append(f"{where}: skill scanner ({scanner}): {severity} "
                            f"{_printable(finding.get('rule_id', '?'), 60)}: "
                            f"{_printable(finding.get('title', ''))}")
    return problems
