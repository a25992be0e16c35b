"""``init --from SEED``: a link in the seed is never followed (what it points at, a secret
outside the seed, reaches no object), and nested template override folders are copied."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, git

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzSECRETKEY1"


def _seed(tmp_path: Path) -> Path:
    seed = tmp_path / "seed"
    shutil.copytree(EXAMPLE, seed, ignore=shutil.ignore_patterns(".expgit"))
    return seed


def _objects(path: Path) -> bytes:
    """The content of every object of the repository at ``path``."""
    return subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=path,
                          capture_output=True, check=True).stdout


def _outside_secret(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "credentials"
    secret.parent.mkdir()
    secret.write_text(f"---\nname: leak\nstatus: active\nsummary: {SECRET}\n---\n{SECRET}\n")
    return secret


@pytest.mark.parametrize("where", ["skills/leak/SKILL.md",
                                   "skills/refund-method-rules/references/leak.md",
                                   ".expgit/templates/leak.md.j2",
                                   ".expgit/templates/prompts/leak.j2", "expgit.toml"])
def test_a_link_to_a_secret_outside_the_seed_is_refused(run_cli: Any, tmp_path: Path,
                                                        where: str) -> None:
    secret = _outside_secret(tmp_path)
    seed = _seed(tmp_path)
    link = seed / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    os.symlink(secret, link)
    target = tmp_path / "new"
    result = run_cli("init", target, "--from", seed)
    assert result.code == 5, result.out + result.err
    assert f"{link}: a symbolic link" in result.err and SECRET not in result.err
    assert not target.exists()  # nothing created, so the secret is in no object


@pytest.mark.parametrize("folder", ["skills", "skills/refund-method-rules", ".expgit",
                                    ".expgit/templates", ".expgit/templates/prompts"])
def test_a_linked_folder_is_refused(run_cli: Any, tmp_path: Path, folder: str) -> None:
    secret = _outside_secret(tmp_path)
    seed = _seed(tmp_path)
    link = seed / folder
    if link.exists():
        shutil.rmtree(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(secret.parent, link)
    result = run_cli("init", tmp_path / "new", "--from", seed)
    assert result.code == 5, result.out + result.err
    assert f"{link}: a symbolic link" in result.err
    assert not (tmp_path / "new").exists()


def test_a_hidden_link_is_left_out_and_its_target_in_no_object(run_cli: Any,
                                                               tmp_path: Path) -> None:
    secret = _outside_secret(tmp_path)
    seed = _seed(tmp_path)
    os.symlink(secret, seed / "skills" / ".cache")
    (seed / ".expgit" / "templates").mkdir(parents=True)
    os.symlink(secret, seed / ".expgit" / "templates" / ".cache")
    target = tmp_path / "new"
    result = run_cli("init", target, "--from", seed)
    assert result.code == 0, result.err
    assert SECRET.encode() not in _objects(target)


def test_nested_template_override_folders_are_copied(run_cli: Any, tmp_path: Path) -> None:
    seed = _seed(tmp_path)
    prompts = seed / ".expgit" / "templates" / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "x.j2").write_text("{{ task }} as the team says\n")
    (seed / ".expgit" / "templates" / "proposal.md.j2").write_text("{{ merger }}\n")
    target = tmp_path / "new"
    result = run_cli("init", target, "--from", seed)
    assert result.code == 0, result.err
    tree = git(target, "ls-tree", "-r", "--name-only", "main").splitlines()
    assert ".expgit/templates/prompts/x.j2" in tree
    assert ".expgit/templates/proposal.md.j2" in tree
    assert git(target, "show", "main:.expgit/templates/prompts/x.j2") == \
        "{{ task }} as the team says\n"
