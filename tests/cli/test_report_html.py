"""``--report-html`` and ``expgit report-html``: one self-contained page, its figures
those of the JSON report (parsed back with the standard library's html.parser)."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from cli_support import agent, cases_file
from conftest import git
from scripted_pipeline import BAGGAGE_CASE, PETS_CASE
from test_cli_train import training_steps

from expgit.llm.scripted import Step
from expgit.runs.html import flipped
from expgit.store.repository import ExperienceRepository


class Page(HTMLParser):
    """Every element with its attributes and its text; the tags and URLs it names."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[dict[str, Any]] = []
        self.tags: set[str] = set()
        self.urls: list[str] = []
        self.styles = ""
        self._open: list[dict[str, Any]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = {"tag": tag, "attrs": dict(attrs), "text": "", "children": []}
        self.tags.add(tag)
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href")]
        if self._open:
            self._open[-1]["children"].append(element)
        self.elements.append(element)
        if tag not in ("meta", "br", "img", "link", "input", "line", "polyline"):
            self._open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if self._open and self._open[-1]["tag"] == tag:
            self._open.pop()

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop()["tag"] == tag:
                break

    def handle_data(self, data: str) -> None:
        for element in self._open:
            element["text"] += data
        if self._open and self._open[-1]["tag"] == "style":
            self.styles += data

    def find(self, tag: str, **attrs: str) -> list[dict[str, Any]]:
        return [e for e in self.elements if e["tag"] == tag
                and all(e["attrs"].get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def rows(self, table_id: str) -> dict[str, list[str]]:
        """A table's rows by their first cell: the cells' texts."""
        table = self.find("table", id=table_id)
        assert len(table) == 1, f"no table {table_id}"
        rows = {}
        for row in table[0]["children"]:
            cells = [" ".join(c["text"].split()) for c in row["children"] if c["tag"] == "td"]
            if cells:
                rows[cells[0] if table_id != "phases" else f"{cells[0]}@{cells[1]}"] = cells
        return rows


def assert_self_contained(page: Page, html: str) -> None:
    assert "script" not in page.tags and "<script" not in html.lower()
    assert "iframe" not in page.tags and "link" not in page.tags and "img" not in page.tags
    assert all(not u.startswith(("http:", "https:", "//", "data:")) for u in page.urls)
    assert "@font-face" not in page.styles and "url(" not in page.styles
    # no attribute names anything outside (the model's URL may show as text)
    assert all("://" not in (v or "") for e in page.elements for v in e["attrs"].values())


def train_with_pages(run_cli: Any, tmp_path: Path, url: str, *extra: str) -> Any:
    """Train on the baggage and pets cases, the pets case held out, with --report
    run.json and --report-html run.html."""
    return run_cli("-C", tmp_path / "repo", "train", "--cases",
                   cases_file(tmp_path / "t.yaml", BAGGAGE_CASE, PETS_CASE),
                   "--eval-cases", cases_file(tmp_path / "e.yaml", PETS_CASE),
                   "--llm", "openai", "--base-url", url, *extra,
                   "--report", tmp_path / "run.json", "--report-html", tmp_path / "run.html")


def test_report_html_of_a_real_run_has_the_json_figures(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    # the held-out case twice: baseline and the proposal's candidate eval; the final eval
    # of main (the applied proposal's tree) reuses the candidate eval
    server = serve([*training_steps(seeded_repo), *(Step("rollout", agent) for _ in range(2))])
    report, page_file = tmp_path / "run.json", tmp_path / "run.html"
    result = train_with_pages(run_cli, tmp_path, server.url, "--mode", "apply")
    assert result.code == 0, result.err
    server.chat.assert_done()
    data = json.loads(report.read_text())
    html = page_file.read_text()
    page = Page(html)
    assert_self_contained(page, html)
    # accuracy per phase and epoch: the table and the plot's points
    phases = page.rows("phases")
    assert list(phases) == [f"{p['phase']}@{p['epoch']}" for p in data["phases"]]
    for p in data["phases"]:
        cells = phases[f"{p['phase']}@{p['epoch']}"]
        assert cells[2:5] == [str(p["cases"]), str(p["passed"]), f"{p['accuracy'] * 100:.2f}%"]
    assert [cells[-1] for cells in phases.values()] == [
        "run", "run", "run", "reused: the candidate_eval's, same tree, no call"]
    points = {(c["attrs"]["data-phase"], int(c["attrs"]["data-epoch"])):
              c["attrs"]["data-accuracy"] for c in page.find("circle")}
    assert points == {(p["phase"], p["epoch"]): f"{p['accuracy'] * 100:.2f}%"
                      for p in data["phases"]}
    assert len(page.find("polyline")) == 1  # baseline -> final (one training epoch)
    # calls and cost per stage
    usage = page.rows("usage")  # no [llm.prices]: every cost is unknown (null), not 0
    assert data["usage"]["total"]["cost"] is None and data["usage"]["currency"] is None
    assert {stage: (int(c[1]), c[4]) for stage, c in usage.items()} == {
        **{s: (u["calls"], "unknown") for s, u in data["usage"]["by_stage"].items()},
        "total": (data["usage"]["total"]["calls"], "unknown")}
    assert usage["total"][1] == "7"
    # flipped cases: the held-out pets case failed before and passes after (apply mode)
    before = {r["case"]: r["passed"] for r in data["phases"][0]["rollouts"]}
    after = {r["case"]: r["passed"] for r in data["phases"][-1]["rollouts"]}
    expected = {c: ["pass" if before[c] else "fail", "pass" if after[c] else "fail"]
                for c in before if before[c] != after[c]}
    assert expected == {PETS_CASE.name: ["fail", "pass"]}
    assert {case: cells[1:] for case, cells in page.rows("flipped").items()} == expected
    compared = " ".join(page.find("p", id="compared")[0]["text"].split())
    assert compared == (f"Compared: the final eval of main at {data['main_after'][:12]} "
                        f"against the baseline eval at {data['main_before'][:12]}; the "
                        "final eval is the candidate_eval of the same tree, not run again.")
    # each proposal's diff, its lines classed (the added experience is all + lines)
    [proposal] = data["proposals"]
    [section] = page.find("section", **{"class": "proposal", "data_proposal": proposal})
    added = [e["text"] for e in page.elements if e["tag"] == "span"
             and e["attrs"].get("class") == "add"]
    assert added and all(line.startswith("+") for line in added)
    assert any("pets" in line.lower() for line in added)
    assert "Not in this repository" not in section["text"]
    # the proposal's measured effect: its candidate eval against the baseline
    [candidate] = data["candidates"]
    [measured] = page.find("section", **{"class": "candidate", "data_proposal": proposal})
    for side in ("baseline", "candidate"):
        assert f"{candidate[side]['accuracy'] * 100:.2f}%" in measured["text"], side
    # the same page from the saved JSON, after the fact
    again = tmp_path / "again.html"
    rendered = run_cli("-C", path, "report-html", report, "-o", again)
    assert rendered.code == 0, rendered.err
    assert again.read_text() == html
    assert git(path, "status", "--porcelain") == ""


def test_a_propose_run_shows_the_candidate_flips_and_says_what_the_final_eval_compared(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    """main does not move in propose mode: the final eval is the baseline's measurement,
    so the flips a reader looks for are the candidate eval's, shown first."""
    server = serve([*training_steps(seeded_repo), *(Step("rollout", agent) for _ in range(2))])
    report, page_file = tmp_path / "run.json", tmp_path / "run.html"
    result = train_with_pages(run_cli, tmp_path, server.url)
    assert result.code == 0, result.err
    server.chat.assert_done()
    data = json.loads(report.read_text())
    [candidate] = data["candidates"]
    assert candidate["flipped"] == [{"case": PETS_CASE.name, "from": "fail", "to": "pass",
                                     "criteria": ["answers"]}]
    page = Page(page_file.read_text())
    [flips] = page.find("table", id="candidate-flips")
    rows = [[" ".join(c["text"].split()) for c in row["children"] if c["tag"] == "td"]
            for row in flips["children"]]
    assert [r for r in rows if r] == [[candidate["proposal"], PETS_CASE.name, "fail", "pass",
                                       "answers"]]
    assert page.find("table", id="flipped") == []  # the final eval repeated the baseline
    main = data["main_before"][:12]
    compared = " ".join(page.find("p", id="compared")[0]["text"].split())
    assert compared == (f"Compared: the final eval against the baseline eval, both of main "
                        f"at {main}, which this run did not change (propose mode): a "
                        "verdict that differs between them is the model's variance, not a "
                        "lesson; a proposal's own effect is its candidate eval; the final "
                        "eval is the baseline_eval of the same tree, not run again.")
    assert "No held-out case changed its verdict between these two evals." in page_file.read_text()
    # the text summary says the same, and lists the candidate's flip
    assert f"compared: {compared.removeprefix('Compared: ').rstrip('.')}" in result.out
    assert f"flipped: {PETS_CASE.name} fail->pass" in result.out


CANDIDATE_SIDE = {"cases": 4, "trials": 3, "passed": 6, "accuracy": 0.5, "mean_score": 0.5,
                  "pass_k": {"1": 0.5, "3": 0.75}, "ci": [0.2535, 0.7465]}


def synthetic_report() -> dict[str, Any]:
    phase = {"phase": "candidate_eval", "epoch": 1, "cases": 4, "passed": 3,
             "accuracy": 0.75, "average_reward": 0.75, "rollouts": []}
    return {
        "command": "train", "repository": "/nowhere", "llm": "scripted", "mode": "propose",
        "phases": [{"phase": "baseline_eval", "epoch": -1, "cases": 4, "passed": 2,
                    "accuracy": 0.5, "average_reward": 0.5}, phase],
        "proposals": ["0123456789ab"],
        "usage": {"by_stage": {"rollout": {"calls": 8, "prompt_tokens": 80,
                                           "completion_tokens": 8, "cost": 0.0125}},
                  "total": {"calls": 8, "prompt_tokens": 80, "completion_tokens": 8,
                            "cost": 0.0125}, "currency": "EUR"},
        "candidates": [{
            "proposal": "0123456789ab", "baseline": CANDIDATE_SIDE,
            "candidate": {**CANDIDATE_SIDE, "passed": 9, "accuracy": 0.75,
                          "ci": [0.4677, 0.9111]},
            "delta": 0.25, "delta_ci": [-0.05, 0.55],
            "flipped": [{"case": "<script>alert(1)</script>", "from": "fail", "to": "pass",
                         "criteria": ["names the fee", "cites the rule"]}],
            "gate": {"checked": True, "passed": False,
                     "reason": "the delta's interval includes 0"}}]}


def test_candidates_section_from_a_saved_report(run_cli: Any, seeded_repo: ExperienceRepository,
                                                tmp_path: Path) -> None:
    report, page_file = tmp_path / "run.json", tmp_path / "run.html"
    data = synthetic_report()
    report.write_text(json.dumps(data))
    result = run_cli("-C", tmp_path / "repo", "report-html", report, "-o", page_file)
    assert result.code == 0, result.err
    html = page_file.read_text()
    page = Page(html)
    assert_self_contained(page, html)  # the case name is escaped, not a script
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    [section] = page.find("section", data_proposal="0123456789ab", **{"class": "candidate"})
    assert "gate failed" in " ".join(section["text"].split())
    assert "the delta's interval includes 0" in section["text"]
    rows = {}
    for table in section["children"]:
        for row in table["children"]:
            cells = [" ".join(c["text"].split()) for c in row["children"] if c["tag"] == "td"]
            if cells:
                rows[cells[0]] = cells
    assert rows["baseline"][1:4] == ["50.00%", "[25.35%, 74.65%]", "6"]
    assert rows["candidate"][1:4] == ["75.00%", "[46.77%, 91.11%]", "9"]
    assert rows["delta"][1:3] == ["+25.00pp", "[-5.00pp, 55.00pp]"]
    assert rows["<script>alert(1)</script>"][1:] == ["fail", "pass",
                                                   "names the fee; cites the rule"]
    assert {c["attrs"]["data-phase"]: c["attrs"]["data-accuracy"]
            for c in page.find("circle")} == {"baseline_eval": "50.00%",
                                              "candidate_eval": "75.00%"}
    assert page.rows("usage")["rollout"][1:] == ["8", "80", "8", "0.012500"]
    assert "cost (EUR)" in page.find("table", id="usage")[0]["text"]
    # this repository has no such proposal: the page says so instead of a diff
    assert "Not in this repository" in page.find("section", data_proposal="0123456789ab",
                                                 **{"class": "proposal"})[0]["text"]


def test_report_html_refuses_what_is_not_a_report(run_cli: Any,
                                                  seeded_repo: ExperienceRepository,
                                                  tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"phases": "no"}')
    result = run_cli("-C", tmp_path / "repo", "report-html", bad, "-o", tmp_path / "x.html")
    assert result.code == 5 and "not a run report" in result.err
    assert not (tmp_path / "x.html").exists()


def test_a_case_flips_on_the_page_as_the_candidate_eval_counts_it() -> None:
    """With trials a case passes when at least half its rollouts pass, on the page as in
    the candidate eval (expgit.train.measurement.candidate.flipped), so the two cannot disagree."""
    def phase(name: str, runs: list[bool]) -> dict[str, Any]:
        return {"phase": name, "rollouts": [{"case": "refund", "passed": p} for p in runs]}

    assert flipped([phase("baseline_eval", [True, True, False]),
                    phase("final_eval", [False, False, True])]) == [
        {"case": "refund", "from": "pass", "to": "fail"}]
    assert flipped([phase("baseline_eval", [True, False]),
                    phase("final_eval", [False, True])]) == []
