"""``expgit evidence`` as text: the chain of :func:`expgit.train.reports.evidence.evidence`, one
section per edit, each trajectory's evaluation per criterion and its transcript."""

from __future__ import annotations

import textwrap

from expgit.train.records.transcript import Transcript
from expgit.train.reports.evidence import EditEvidence, Evidence, TrajectoryEvidence

INDENT = "    "


def _indented(text: str, prefix: str = INDENT) -> list[str]:
    return [prefix + line if line.strip() else "" for line in text.rstrip("\n").split("\n")]


def transcript_lines(transcript: Transcript) -> list[str]:
    calls = transcript.tool_calls
    lines = [f"transcript: {len(transcript.messages)} messages, {calls} tool "
             f"call{'s' if calls != 1 else ''}"
             + (f"; the rollout failed: {transcript.error}" if transcript.error else "")]
    for message in transcript.messages:
        for part in message.parts:
            if part.type == "text":
                lines.append(f"  [{message.role}]")
                lines += _indented(part.text or "")
                continue
            lines.append(f"  [{message.role}] tool call {part.name} ({part.id}, "
                         f"{part.status})")
            lines += _indented(f"input: {part.input}")
            lines += _indented(f"output: {part.output}")
    return lines


def trajectory_lines(shown: TrajectoryEvidence) -> list[str]:
    lines = [f"-- trajectory {shown.id} ({shown.uri})"]
    if shown.title or shown.case:
        lines.append(f"title: {shown.title}; outcome: {shown.outcome}; case {shown.case} "
                     f"(task {shown.task_signature})")
    evaluation = shown.evaluation
    if evaluation is not None:
        lines.append(f"evaluation: {'passed' if evaluation.passed else 'failed'}, score "
                     f"{evaluation.score:.2f}")
        for result in evaluation.criterion_results:
            said = "; ".join([*result.feedback, *result.evidence])
            lines.append(f"  [{'PASS' if result.passed else 'FAIL'}] {result.criterion_name}"
                         f" ({result.score:.2f})" + (f": {said}" if said else ""))
        lines += [f"  {line}" for line in evaluation.feedback]
    if shown.analysis:
        lines += ["analysis:", *_indented(shown.analysis, "  ")]
    if shown.transcript is not None:
        lines += transcript_lines(shown.transcript)
    if shown.note:
        lines.append(f"note: {shown.note}")
    return lines


def edit_lines(edit: EditEvidence) -> list[str]:
    record = edit.track_record
    who = f"model {edit.model}" if edit.model else f"experience {edit.target}"
    lines = [f"== edit {edit.id} ({edit.state}): {edit.operation} {edit.target}",
             "rationale:", *_indented(textwrap.fill(edit.rationale, 88), "  "),
             f"confidence: {edit.confidence:.2f} stated, {edit.shown_confidence:.2f} shown "
             f"({who}: predictions hit {record.get('hits', 0)} of "
             f"{record.get('hits', 0) + record.get('misses', 0)} checked)"]
    cases, tasks = edit.predicts.get("cases", []), edit.predicts.get("tasks", [])
    if cases or tasks:
        said = ", ".join([*cases, *(f"any case of task {t}" for t in tasks)])
        lines.append(f"predicts fail -> pass: {said}; checked: {edit.verdict or 'not yet'}")
    else:
        lines.append("predicts: nothing (its rollout passed, or it was proposed by hand)")
    if edit.diff:
        lines += ["diff:", *_indented(edit.diff, "  ")]
    for shown in edit.trajectories:
        lines += ["", *trajectory_lines(shown)]
    if not edit.trajectories:
        lines.append("evidence: none cited")
    return lines


def render_evidence(shown: Evidence) -> str:
    state = f" ({shown.state})" if shown.state else ""
    lines = [f"{shown.kind} {shown.id}{state}: {shown.subject}"]
    for edit in shown.edits:
        lines += ["", *edit_lines(edit)]
    lines += [f"missing: {line}" for line in shown.missing]
    if shown.trajectory is not None:
        lines += ["", *trajectory_lines(shown.trajectory)]
    return "\n".join(lines) + "\n"
