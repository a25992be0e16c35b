"""Endpoint credentials (issue 32 item 13): the password of ``--base-url
http://user:PASS@host/v1`` is in none of the ``--report`` JSON, the HTML page, the
``--json`` output, stderr and the repository's objects; an endpoint that does not answer
is named without it too."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from cli_support import cases_file
from scripted_pipeline import BAGGAGE_CASE, PETS_CASE, agent
from test_cli_train import training_steps

from expgit.llm.provenance import display_url
from expgit.llm.scripted import Step
from expgit.store.repository import ExperienceRepository

PASSWORD = "S3cretPassw0rdXyz"


def _credentialed(url: str) -> str:
    return url.replace("http://", f"http://deploy:{PASSWORD}@", 1)


def test_display_url_drops_the_userinfo_only() -> None:
    assert display_url(f"https://u:{PASSWORD}@llm.example.com:8443/v1?x=1") == (
        "https://llm.example.com:8443/v1?x=1")
    assert display_url("https://token@llm.example.com/v1") == "https://llm.example.com/v1"
    assert display_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


def test_the_endpoint_password_is_in_no_report_output_or_object(
        run_cli: Any, serve: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    path = tmp_path / "repo"
    server = serve([*training_steps(seeded_repo), *(Step("rollout", agent) for _ in range(2))])
    url = _credentialed(server.url)
    report, page = tmp_path / "run.json", tmp_path / "run.html"
    result = run_cli("-C", path, "train", "--cases",
                     cases_file(tmp_path / "t.yaml", BAGGAGE_CASE, PETS_CASE),
                     "--eval-cases", cases_file(tmp_path / "e.yaml", PETS_CASE),
                     "--mode", "apply", "--llm", "openai", "--base-url", url, "--json",
                     "--report", report, "--report-html", page)
    assert result.code == 0, result.err
    server.chat.assert_done()
    shown = server.url.removesuffix("/v1")
    assert shown in report.read_text()  # the endpoint is still named, without userinfo
    for where, text in (("report", report.read_text()), ("html", page.read_text()),
                        ("json", result.out), ("stderr", result.err)):
        assert PASSWORD not in text, where
    objects = subprocess.run(["git", "-C", str(path), "cat-file", "--batch-all-objects",
                              "--batch"], check=True, capture_output=True).stdout
    assert PASSWORD.encode() not in objects


def test_an_unreachable_endpoint_is_named_without_its_password(
        run_cli: Any, seeded_repo: ExperienceRepository, tmp_path: Path) -> None:
    result = run_cli("-C", tmp_path / "repo", "eval", "--cases",
                     cases_file(tmp_path / "e.yaml", PETS_CASE), "--llm", "openai",
                     "--base-url", f"http://deploy:{PASSWORD}@127.0.0.1:9/v1", "--json")
    assert result.code != 0
    assert "127.0.0.1:9" in result.err
    assert PASSWORD not in result.err + result.out
