"""Every page of the docs (README.md and docs/*.md) keeps its snippets true: each page's
``sh`` and ``python`` blocks run in order in a fresh sandbox against the scripted model,
and every fence names its language (tests/docs_snippets.py has the conventions)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from docs_snippets import Block, blocks, check_fences, run_page

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The LLM calls each page's snippets make, by stage; a page not named makes none.
# The cases: 10 in train.yaml (one with an llm_judge criterion), 7 in eval.yaml, 2 each
# in demo_train.yaml and demo_eval.yaml. Every rollout fails, so each is reflected on in
# one call (analysed and estimated); a rollout already stored as a trajectory is only
# estimated. Each run merges once.
CALLS: dict[str, dict[str, int]] = {
    # run_example.sh train (the demo cases): 2 + 2 + 2 rollouts (baseline, train,
    # candidate; the final eval of the unchanged main is the baseline's), 2 reflect,
    # 1 merge; its eval --compare by hand: 2 + 2 rollouts
    "README.md": {"rollout": 10, "reflect": 2, "merge": 1},
    # the Python agent: 1 rollout
    "docs/context.md": {"rollout": 1},
    # eval: 7 rollouts; train: 7 + 10 + 7 rollouts, 1 judge, 10 reflect, 1 merge;
    # train-rollouts: 2 reflect, 1 merge
    "docs/training.md": {"rollout": 31, "judge": 1, "reflect": 12, "merge": 2},
    # env serve train: as train (the rollouts run in the service); eval: 7 rollouts;
    # serve: the first recorded rollout, 1 reflect, 1 merge
    "docs/services.md": {"rollout": 31, "judge": 1, "reflect": 11, "merge": 2},
    # sessions run: 1 segment (the 6-message session), 2 score (the thumbs-down session
    # is labelled by its feedback), 3 reflect, 1 merge
    "docs/sessions.md": {"segment": 1, "score": 2, "reflect": 3, "merge": 1},
    # train-rollouts --remote: 2 reflect, 1 merge
    "docs/remote.md": {"reflect": 2, "merge": 1},
    # eval --skill: 1 case x 3 runs x 2 configurations, each judged on its one sentence
    # assertion; train on skill:refund-rules: 1 baseline, 1 training (judged) and
    # 1 candidate rollout, 1 reflect, 1 merge (the proposal adds another skill, so the
    # skill is not measured old against new)
    "docs/skill-evals.md": {"rollout": 9, "judge": 7, "reflect": 1, "merge": 1},
}
# The blocks marked not-run, by page: installs, the whole suite, by-hand benchmarks, the
# tau2 extra's runs, the main job again, zsh and fish. A new one is a decision, made here.
NOT_RUN = {"README.md": 3, "docs/development.md": 6, "docs/getting-started.md": 3,
           "docs/mcp-tools.md": 1, "docs/security.md": 1, "docs/tau2.md": 4,
           "docs/workflow.md": 1}


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_every_page_with_calls_exists() -> None:
    assert set(CALLS) | set(NOT_RUN) <= {page_id(p) for p in PAGES}


def test_a_block_is_not_run_only_by_a_decision_made_here() -> None:
    marked = {page_id(p): sum((b.marker or "").startswith("not-run")
                              for b in blocks(p.read_text(encoding="utf-8"), page_id(p)))
              for p in PAGES}
    assert {page: n for page, n in marked.items() if n} == NOT_RUN


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_fence_names_its_language(page: Path) -> None:
    check_fences(blocks(page.read_text(encoding="utf-8"), page_id(page)), page_id(page))


@pytest.mark.slow  # every page runs the CLI end to end: 45 s in all, the README's the main job
@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_page_snippets_run_in_order(page: Path, tmp_path: Path) -> None:
    run_page(page, CALLS.get(page_id(page), {}), tmp_path)


def test_a_bare_fence_or_an_unknown_language_is_refused() -> None:
    for fence in ("```", "```bash", "```ini"):
        with pytest.raises(AssertionError, match="fence language"):
            check_fences(blocks(f"Text.\n\n{fence}\nls\n```\n"), "page")


def test_a_marker_needs_a_reason_and_a_runnable_block() -> None:
    with pytest.raises(AssertionError, match="malformed marker"):
        blocks("<!-- not-run: -->\n```sh\nls\n```\n")
    with pytest.raises(AssertionError, match="malformed marker"):
        blocks("<!-- readme: skip (old style) -->\n```sh\nls\n```\n")
    with pytest.raises(AssertionError, match="belongs before a sh or python"):
        check_fences(blocks("<!-- not-run: shown -->\n```text\nls\n```\n"), "page")


def test_the_markers_decide_what_runs() -> None:
    found = blocks("```sh\nls\n```\n\n<!-- not-run: it installs -->\n```sh\npip x\n```\n"
                   "<!-- run: background -->\n```sh\nexpgit serve --port 8765\n```\n"
                   "  ```python\n  print(1)\n  ```\n```text\nout\n```\n")
    assert [(b.lang, b.marker, b.runs) for b in found] == [
        ("sh", None, True), ("sh", "not-run: it installs", False),
        ("sh", "background", True), ("python", None, True), ("text", None, False)]
    assert found[3] == Block(13, "python", "print(1)", None)


def test_a_parsed_fence_must_parse() -> None:
    for lang, body in (("toml", "a = "), ("json", "{"), ("jsonl", "{}\n{"),
                       ("yaml", "a: [")):
        with pytest.raises((tomllib.TOMLDecodeError, json.JSONDecodeError, yaml.YAMLError)):
            check_fences(blocks(f"```{lang}\n{body}\n```\n"), "page")


def test_ci_runs_the_readme_test_command_exactly() -> None:
    """.ci/run's last line is the README's test command, a sh block of its own, and it
    runs the whole suite on every core (docs/development.md: the lanes)."""
    last = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"```sh\n{last}\n```" in (ROOT / "README.md").read_text()
    assert last.endswith("python3 -m pytest -q -n auto")
