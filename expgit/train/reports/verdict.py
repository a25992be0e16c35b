"""What a training run learned, said plainly after its summary.

A run learned something when a proposal's candidate eval beat its baseline on the
held-out cases beyond chance: the lower end of the delta's 95% interval is above 0. A
positive delta whose interval still holds 0 (two held-out cases: one flip) is said to be
too few cases to tell. It learned nothing when it made no proposal, or when no
proposal's snapshot did better than ``main``. Without a candidate eval (no
``--eval-cases``, ``--no-candidate-eval``) the effect is not known, and the lines say
that instead of guessing.

When the embedded model learned nothing (or nothing shown), the lines also say what a
capable model changes, and give the one command that runs the same training on an
OpenAI-compatible endpoint (``--base-url``; its key in ``OPENAI_API_KEY``, as ``[llm]
api_key_env``).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from expgit.llm.provenance import LOCAL_DESCRIPTION_PREFIX
from expgit.train.measurement.candidate import CandidateReport
from expgit.train.reports.run_report import RunReport

# the command-line options that choose the model, each followed by its value
MODEL_OPTIONS = ("--llm", "--model", "--base-url")
ENDPOINT_PLACEHOLDER = "http://127.0.0.1:8000/v1"
MODEL_PLACEHOLDER = "MODEL"
CAPABLE_MODEL = (
    "The embedded model (SmolLM2-135M) is here to show the workflow on any machine; it "
    "is too small to follow a lesson it is shown, or to write one that changes its own "
    "answers. A capable model (an instruct model of 7B parameters or more, or a hosted "
    "one) answers by the experiences it reads, names the rule a failed answer broke, "
    "and writes that rule where the agent reads it: the candidate eval then measures "
    "the edit's effect on the held-out cases.")


def learned(report: RunReport) -> bool | None:
    """True: a proposal raised the held-out accuracy beyond chance (its delta's interval
    above 0); False: no proposal, or none shown to do better than ``main``; None:
    proposals whose effect was not measured."""
    if not report.proposals:
        return False
    if not report.candidates:
        return None
    return any(c.delta_ci[0] > 0 for c in report.candidates)


def _figures(c: CandidateReport) -> str:
    b, k = c.baseline, c.candidate
    low, high = c.delta_ci
    return (f"proposal {c.proposal} passes {k.passed}/{k.cases * k.trials} held-out "
            f"cases where main passes {b.passed}/{b.cases * b.trials} "
            f"({c.delta * 100:+.2f}pp, 95% interval {low * 100:+.2f} to {high * 100:+.2f})")


def learned_line(report: RunReport) -> str:
    """One plain sentence on what the run learned."""
    verdict = learned(report)
    if verdict is None:
        return ("learned: not measured (no held-out cases measured the proposals: "
                "`train --eval-cases FILE`, or `apply ID --gate --eval-cases FILE`)")
    if not report.proposals:
        return ("learned: nothing. The run made no proposal: no edit the model wrote "
                "survived (the rejected edits and failed calls above say why)")
    best = max(report.candidates, key=lambda c: (c.delta_ci[0], c.delta))
    if verdict:
        return f"learned: {_figures(best)}"
    if best.delta > 0:
        return (f"learned: nothing shown. The {_figures(best)}: the interval holds no "
                "change, too few cases to tell a lesson from chance")
    delta = max(c.delta for c in report.candidates)
    which = "No proposal did better than" if delta == 0 else "Every proposal did worse than"
    return (f"learned: nothing. {which} main on the held-out cases (best delta "
            f"{delta * 100:+.2f}pp)")


def endpoint_command(args: Sequence[str], program: str = "expgit") -> str:
    """``args`` (a command line without the program) pointed at an OpenAI-compatible
    endpoint: the model options dropped, ``--base-url`` and ``--model`` added."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in MODEL_OPTIONS:
            skip = True
            continue
        if arg.split("=", 1)[0] in MODEL_OPTIONS:
            continue
        kept.append(arg)
    return shlex.join([program, *kept, "--base-url", ENDPOINT_PLACEHOLDER,
                       "--model", MODEL_PLACEHOLDER])


def verdict_lines(report: RunReport, args: Sequence[str]) -> list[str]:
    """The lines printed after a training run's summary (none after an eval)."""
    if report.command == "eval":
        return []
    lines = [learned_line(report)]
    if learned(report) is False and report.llm.startswith(LOCAL_DESCRIPTION_PREFIX):
        lines += [CAPABLE_MODEL,
                  "The same run on an OpenAI-compatible endpoint (llama.cpp's server, "
                  "vLLM, Ollama; OPENAI_API_KEY=KEY in front if it needs a key):",
                  f"  {endpoint_command(args)}"]
    return lines
