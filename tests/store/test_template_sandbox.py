"""Templates render in jinja2's sandbox: a repository's override cannot run code, and
``validate`` renders every override once, refusing one that fails (issue 32, items 1-2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import RunCli
from test_templates import commit_on_main

from expgit.errors import EXIT_INVALID, InvalidInputError
from expgit.store.format.templates import check_overrides, render, render_prompt
from expgit.store.repository import ExperienceRepository

SYSTEM_CALL = "{{ cycler.__init__.__globals__.os.system('touch PWNED') }}"
ENVIRON = "{{ cycler.__init__.__globals__.os.environ }}"
ESCAPES = {
    "system": "{% block system %}" + SYSTEM_CALL + "{% endblock %}{% block user %}u"
              "{% endblock %}",
    "environ": "{% block system %}s{% endblock %}{% block user %}" + ENVIRON +
               "{% endblock %}",
    "format": "{% block system %}{{ '{0.__class__.__mro__}'.format(cycler) }}"
              "{% endblock %}{% block user %}u{% endblock %}",
}


@pytest.mark.parametrize("payload", sorted(ESCAPES))
def test_an_override_cannot_run_code(bare_repo: ExperienceRepository, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch, payload: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EXPGIT_PLANTED_SECRET", "s3cr3t-value")
    commit_on_main(bare_repo, {".expgit/templates/prompts/judge.md.j2": ESCAPES[payload]})
    with pytest.raises(InvalidInputError) as caught:
        render_prompt("judge", bare_repo, who="me")
    assert caught.value.exit_code == EXIT_INVALID
    assert ".expgit/templates/prompts/judge.md.j2: unsafe" in caught.value.message
    assert "s3cr3t-value" not in caught.value.message
    assert not (tmp_path / "PWNED").exists()


def test_an_override_that_does_not_compile_is_named(bare_repo: ExperienceRepository) -> None:
    commit_on_main(bare_repo, {".expgit/templates/proposal.md.j2": "{% if %}"})
    with pytest.raises(InvalidInputError, match=r"template \.expgit/templates/proposal\.md"
                       r"\.j2: cannot render"):
        render("proposal.md.j2", bare_repo)


def test_packaged_templates_pass_the_sample_render(bare_repo: ExperienceRepository) -> None:
    """Every packaged template, committed as an override, renders with the sample context
    (the check must not refuse a faithful copy)."""
    from expgit.resources import data_dir

    root = data_dir("templates")
    copies = {f".expgit/templates/{path.relative_to(root)}": path.read_text()
              for path in root.rglob("*.j2")}
    commit = commit_on_main(bare_repo, copies)
    tree = bare_repo.git.read_commit(commit).tree
    assert len(copies) > 10 and check_overrides(bare_repo, tree) == []


def test_validate_refuses_an_override_that_fails_to_render(
        seeded_repo: ExperienceRepository, run_cli: RunCli, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    good = commit_on_main(seeded_repo, {
        ".expgit/templates/prompts/judge.md.j2":
            "{% block system %}rules {{ case.name | upper }}{% endblock %}"
            "{% block user %}{% for c in rubric.criteria %}{{ c.name }}{% endfor %}"
            "{% endblock %}"})
    path = os.fspath(seeded_repo.git.work_tree or seeded_repo.git.git_dir)
    result = run_cli("-C", path, "validate", good)
    assert result.code == 0, result.err
    bad = commit_on_main(seeded_repo, {
        ".expgit/templates/prompts/estimate.md.j2": ESCAPES["system"],
        ".expgit/templates/prompts/merge.md.j2": "{% block system %}only one{% endblock %}",
        ".expgit/templates/trajectory.md.j2": "{{ x.y(",
    })
    result = run_cli("-C", path, "validate", "--json")
    assert result.code == EXIT_INVALID
    assert ".expgit/templates/prompts/estimate.md.j2: unsafe" in result.out
    assert ".expgit/templates/prompts/merge.md.j2: cannot render: a prompt template must " \
        "define the blocks" in result.out
    assert ".expgit/templates/trajectory.md.j2: cannot render" in result.out
    assert seeded_repo.main_commit() == bad
    assert not (tmp_path / "PWNED").exists()
