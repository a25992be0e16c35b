"""Checks of experience files at a commit, in the index, or between two commits.

Rules: each file under the experiences root is ``<name>.md`` (no folders, no other
files; dotfiles such as ``.gitkeep`` are ignored), UTF-8, with valid front matter whose
``name`` equals the file stem, within the token budget. Names are unique because the
stem is the name and the folder is flat.
"""

from __future__ import annotations

from collections.abc import Iterable

from expgit.errors import InvalidInputError, ValidationError
from expgit.store import skill_check
from expgit.store.experience import check_experience, decode_experience
from expgit.store.repository import ExperienceRepository


def check_files(repo: ExperienceRepository, files: Iterable[tuple[str, str]]) -> list[str]:
    """Problems of ``(path, blob)`` pairs under the experiences root; [] when all valid."""
    files = list(files)
    if repo.layout.skills:
        return skill_check.check_files(repo, files)
    problems: list[str] = []
    blobs = repo.git.read_blobs(blob for _, blob in files)
    for path, blob in files:
        rel = path[len(repo.root) + 1:] if path.startswith(repo.root + "/") else None
        if rel is None or rel.startswith(".") or "/." in rel:
            continue
        name = repo.name_of(path)
        if name is None:
            problems.append(f"{path}: not an experience file: the {repo.root}/ folder holds "
                            "only <name>.md files, with no sub-folders")
            continue
        try:
            check_experience(decode_experience(blobs[blob], path), path, name,
                             repo.settings.token_budget)
        except InvalidInputError as exc:
            problems.append(f"{exc.message} ({exc.hint})" if exc.hint else exc.message)
    return problems


def _tree_files(repo: ExperienceRepository, commit: str, old: str | None = None
                ) -> list[tuple[str, str]]:
    """Files under the root at ``commit`` (only those changed since ``old`` if given)."""
    args = (["diff-tree", "-r", "--no-renames", "--diff-filter=AMT", old, commit]
            if old else ["ls-tree", "-r", commit])
    text = repo.git.out(*args, "--", f"{repo.root}/")
    files = []
    for line in text.splitlines():
        meta, _, path = line.partition("\t")
        sha = meta.split()[3] if old else meta.split()[2]
        files.append((path, sha))
    return files


def validate_commit(repo: ExperienceRepository, commit: str, since: str | None = None
                    ) -> list[str]:
    if repo.layout.skills:
        return skill_check.validate_commit(repo, commit, since)
    return check_files(repo, _tree_files(repo, commit, since))


def validate_index(repo: ExperienceRepository) -> list[str]:
    """Problems of the staged experience files that differ from HEAD."""
    if repo.layout.skills:
        return skill_check.validate_index(repo)
    head = repo.git.resolve("HEAD")
    changed = repo.git.out("diff", "--cached", "--name-only", "--no-renames",
                           "--diff-filter=AMT", *([head] if head else []), "--",
                           f"{repo.root}/").splitlines()
    if not changed:
        return []
    staged = repo.git.out("ls-files", "-s", "--", *changed)
    files = [(line.partition("\t")[2], line.split()[1]) for line in staged.splitlines()]
    return check_files(repo, files)


def require_valid(problems: list[str], where: str) -> None:
    if problems:
        raise ValidationError(problems, hint=f"fix the files {where} and try again")
