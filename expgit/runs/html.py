"""A run report as one self-contained HTML page (``--report-html``, ``expgit
report-html``): rendered from the JSON report (what ``--report FILE`` writes) by the
``report.html.j2`` template, with everything inline: CSS, an SVG plot of accuracy per
phase and epoch (its points computed here), no script, no font, no external URL.

Each proposal's diff is read from the repository at render time (the report names the
proposals only); a proposal the repository does not have shows as missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from expgit.errors import ExpgitError, InvalidInputError
from expgit.store.format.templates import render
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.proposals import find_proposal
from expgit.train.reports.run_report import TRAINING_PHASES, RunReport, held_out_comparison

PLOT_WIDTH, PLOT_HEIGHT = 720, 260
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 24, 30, 40
PAD_X = 36  # the first and last epoch's points stand off the axes
HELD_OUT = ("baseline_eval", "final_eval")  # one line: before and after training


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f}%"


@dataclass
class Point:
    x: float
    y: float
    phase: str
    epoch: int
    accuracy: str


@dataclass
class Series:
    name: str
    css: str  # its colour class
    points: list[Point] = field(default_factory=list)

    @property
    def polyline(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)


def _series_of(phase: str) -> tuple[str, str]:
    if phase in TRAINING_PHASES:
        return "training", "s-train"
    if phase in HELD_OUT:
        return "held-out eval", "s-eval"
    return phase, "s-other"


def plot(phases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The accuracy plot: x by epoch, y 0..100%; a series per kind of phase."""
    inner_w = PLOT_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    inner_h = PLOT_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    epochs = sorted({int(p["epoch"]) for p in phases})
    low, high = (epochs[0], epochs[-1]) if epochs else (0, 0)

    def x_of(epoch: int) -> float:
        if high == low:
            return MARGIN_LEFT + inner_w / 2
        return MARGIN_LEFT + PAD_X + (epoch - low) / (high - low) * (inner_w - 2 * PAD_X)

    def y_of(accuracy: float) -> float:
        return MARGIN_TOP + (1 - max(0.0, min(1.0, accuracy))) * inner_h

    series: dict[str, Series] = {}
    for p in phases:
        name, css = _series_of(p["phase"])
        series.setdefault(name, Series(name, css)).points.append(
            Point(x_of(int(p["epoch"])), y_of(float(p["accuracy"])), p["phase"],
                  int(p["epoch"]), percent(p["accuracy"])))
    grid = [{"y": y_of(v / 100), "label": f"{v}%"} for v in (0, 25, 50, 75, 100)]
    ticks = [{"x": x_of(e), "label": str(e)} for e in epochs]
    return {"width": PLOT_WIDTH, "height": PLOT_HEIGHT, "left": MARGIN_LEFT,
            "right": PLOT_WIDTH - MARGIN_RIGHT, "bottom": PLOT_HEIGHT - MARGIN_BOTTOM,
            "series": list(series.values()), "grid": grid, "ticks": ticks}


def _case_results(phase: dict[str, Any]) -> dict[str, bool]:
    """Per case: passed (at least half its rollouts passed, as a candidate eval counts)."""
    runs: dict[str, list[bool]] = {}
    for r in phase.get("rollouts", []):
        runs.setdefault(r["case"], []).append(bool(r["passed"]))
    return {case: sum(passed) >= len(passed) / 2 for case, passed in runs.items()}


def flipped(phases: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The held-out cases whose verdict changed from the baseline to the final eval."""
    by_name = {p["phase"]: p for p in phases}
    if not all(name in by_name for name in HELD_OUT):
        return []
    before, after = (_case_results(by_name[name]) for name in HELD_OUT)
    return [{"case": case, "from": "pass" if before[case] else "fail",
             "to": "pass" if after[case] else "fail"}
            for case in sorted(before) if case in after and before[case] != after[case]]


def diff_lines(diff: str) -> list[tuple[str, str]]:
    """``(css class, line)`` of a unified diff: meta, hunk, add, del, or context."""
    lines = []
    for line in diff.splitlines():
        css = ("meta" if line.startswith(("+++", "---")) else "hunk" if line.startswith("@@")
               else "add" if line.startswith("+") else "del" if line.startswith("-")
               else "ctx")
        lines.append((css, line))
    return lines


def proposals(ids: Sequence[str], repo: ExperienceRepository | None) -> list[dict[str, Any]]:
    shown = []
    for pid in ids:
        item: dict[str, Any] = {"id": pid, "found": False, "subject": "", "state": "",
                                "files": []}
        if repo is not None:
            try:
                proposal = find_proposal(repo, pid)
            except ExpgitError:
                proposal = None
            if proposal is not None:
                item.update(found=True, subject=proposal.subject, state=proposal.state,
                            files=[{"name": c.name, "operation": c.operation,
                                    "lines": diff_lines(c.diff)}
                                   for c in proposal.changes])
        shown.append(item)
    return shown


def _interval(ci: Sequence[float] | None, scale: float = 100, unit: str = "%") -> str:
    if not ci or len(ci) != 2:
        return ""
    return f"[{ci[0] * scale:.2f}{unit}, {ci[1] * scale:.2f}{unit}]"


def skill_lifts(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Skills on their own evals (a proposal's changed skills, or eval --skill), formatted:
    each side's configuration and pass rate, the lift and its interval."""
    shown = []
    for lift in items:
        sides = {}
        for side in ("baseline", "candidate"):
            s = lift.get(side) or {}
            sides[side] = {"config": lift.get(f"{side}_config", ""),
                           "accuracy": percent(s.get("accuracy")),
                           "passed": s.get("passed"),
                           "runs": (s.get("cases") or 0) * (s.get("trials") or 0)}
        delta = lift.get("delta")
        shown.append({"skill": lift.get("skill", ""), "evals": lift.get("evals_file", ""),
                      **sides, "errors": lift.get("errors") or 0,
                      "lift": "-" if delta is None else f"{delta * 100:+.2f}pp",
                      "lift_ci": _interval(lift.get("delta_ci"), unit="pp")})
    return shown


def candidates(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The candidate evals (baseline vs candidate per proposal), formatted."""
    shown = []
    for c in items:
        gate = c.get("gate") or {}
        verdict = ("not checked" if not gate.get("checked") else
                   "passed" if gate.get("passed") else "failed")
        sides = {}
        for side in ("baseline", "candidate"):
            s = c.get(side) or {}
            sides[side] = {"accuracy": percent(s.get("accuracy")),
                           "ci": _interval(s.get("ci")),
                           "passed": s.get("passed"), "cases": s.get("cases"),
                           "trials": s.get("trials")}
        delta = c.get("delta")
        shown.append({
            "proposal": c.get("proposal", ""), **sides,
            "delta": "-" if delta is None else f"{delta * 100:+.2f}pp",
            "delta_ci": _interval(c.get("delta_ci"), unit="pp"),
            "verdict": verdict, "reason": gate.get("reason") or "",
            "flipped": [{"case": f.get("case", ""), "from": f.get("from", ""),
                         "to": f.get("to", ""), "criteria": list(f.get("criteria") or [])}
                        for f in c.get("flipped") or []],
            "skill_lifts": skill_lifts(c.get("skill_lifts") or [])})
    return shown


def render_html(data: dict[str, Any], repo: ExperienceRepository | None = None) -> str:
    """The page of the run report ``data`` (the JSON of a RunReport; its defaults filled
    in, and keys the model does not know, e.g. ``candidates``, kept)."""
    model = RunReport.model_validate(data)
    data = {**data, **model.model_dump(mode="json")}
    phases = list(data.get("phases") or [])
    usage = data.get("usage") or {}
    return render("report.html.j2", repo, report=data, phases=phases,
                  percent=percent, plot=plot(phases), flipped=flipped(phases),
                  compared=held_out_comparison(model),
                  stages=usage.get("by_stage") or {}, total=usage.get("total") or {},
                  usage_currency=usage.get("currency"),
                  proposals=proposals(data.get("proposals") or [], repo),
                  candidates=candidates(data.get("candidates") or []),
                  skill_lift=skill_lifts([data["skill_lift"]] if data.get("skill_lift")
                                         else []))


def write_html(data: dict[str, Any], path: Path, repo: ExperienceRepository | None) -> None:
    page = render_html(data, repo)
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot write the HTML report: {exc.strerror}"
                                ) from None
