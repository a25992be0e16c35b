"""Skills-layout repositories for tests: the example repository as Agent Skills folders,
and the spec's reference validator (``agentskills validate`` from skills-ref) run on the
skill folders of a revision."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

from expgit.store.format.experience import parse_experience

AGENTSKILLS = Path(sys.executable).parent / "agentskills"
SKILLS_ROOT = "skills"
# a file of the checked-baggage-allowance skill besides its SKILL.md, which no edit touches
# an always-on skill, as a SKILL.md with expgit's field in its metadata
REFUND = "refund-rules"
REFUND_MD = f"""---
name: {REFUND}
description: Decide the refund method for a cancelled booking.
metadata:
  expgit-always: "true"
---
Refund to the original payment method unless the customer asks for a voucher.
"""
BAGGAGE_REFERENCE = f"{SKILLS_ROOT}/checked-baggage-allowance/references/fees.md"
BAGGAGE_REFERENCE_BYTES = b"# Fees\n\nEach checked bag past the free allowance: 50 USD.\n"


def skills_seed(example: Path, tmp: Path) -> Path:
    """A seed folder for ``init --from``: ``example`` (a repository folder in either
    layout) with its experiences as ``skills/<name>/SKILL.md`` folders (the SKILL.md
    codec writes each front matter), ``layout = "skills"``, and a reference file in the
    checked-baggage-allowance skill."""
    folder = tmp / "skills-seed"
    shutil.copytree(example, folder)
    settings = tomllib.loads((folder / "expgit.toml").read_text())
    root = folder / settings.get("experiences_root", "experiences")
    if settings.get("layout") != "skills":
        for file in sorted(root.glob("*.md")):
            exp = parse_experience(file.read_text(), str(file))
            skill = exp.model_copy(update={"raw_front_matter": None, "spec_fields": {}})
            (folder / SKILLS_ROOT / exp.name).mkdir(parents=True)
            (folder / SKILLS_ROOT / exp.name / "SKILL.md").write_text(skill.render())
        shutil.rmtree(root)
    elif root != folder / SKILLS_ROOT:
        root.rename(folder / SKILLS_ROOT)
    lines = [ln for ln in (folder / "expgit.toml").read_text().splitlines()
             if not ln.startswith(("experiences_root", "layout"))]
    (folder / "expgit.toml").write_text(
        f'experiences_root = "{SKILLS_ROOT}"\nlayout = "skills"\n' + "\n".join(lines) + "\n")
    reference = folder / BAGGAGE_REFERENCE
    reference.parent.mkdir(parents=True)
    reference.write_bytes(BAGGAGE_REFERENCE_BYTES)
    return folder


def agentskills_validate(repo: Path, rev: str, out: Path, root: str = SKILLS_ROOT
                         ) -> list[str]:
    """Check out ``rev``'s tree with ``git archive`` into ``out`` and run the reference
    validator on every skill folder under ``root``; return the folders checked."""
    archive = subprocess.run(["git", "-C", str(repo), "archive", rev],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    folders = sorted(p.parent for p in (out / root).glob("*/SKILL.md"))
    for folder in folders:
        proc = subprocess.run([str(AGENTSKILLS), "validate", str(folder)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, (folder.name, proc.stdout, proc.stderr)
    return [f.name for f in folders]
