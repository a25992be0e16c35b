"""The pull request comment of a gate: ``expgit eval --compare BASE HEAD --comment FILE``
renders the head's measured effect against its base as markdown
(``templates/gate_comment.md.j2``), behind a hidden marker line a CI job looks for to
update its one comment instead of adding another (examples/ci/expgit-ci.sh)."""

from __future__ import annotations

from pathlib import Path

from expgit.store.format import templates
from expgit.store.repository import ExperienceRepository
from expgit.train.reports.run_report import RunReport

GATE_MARKER = "<!-- expgit-gate -->"


def render_comment(repo: ExperienceRepository, report: RunReport) -> str:
    """The comment of ``report``, a run of ``eval --compare`` (one candidate)."""
    [candidate] = report.candidates
    base, head = (phase.batches[0].policy_commit for phase in report.phases)
    return templates.render("gate_comment.md.j2", repo, marker=GATE_MARKER,
                            report=candidate, base=base, head=head,
                            tree=repo.git.read_commit(head).tree,
                            llm=report.llm, provenance=report.provenance,
                            usage=report.usage)


def write_comment(repo: ExperienceRepository, report: RunReport, path: Path) -> None:
    path.write_text(render_comment(repo, report), encoding="utf-8")
