"""Checks of experience files at a commit, in the index, or between two commits.

Rules: each file under the experiences root is ``<name>.md`` (no folders, no other
files; dotfiles such as ``.gitkeep`` are ignored), UTF-8, with valid front matter whose
``name`` equals the file stem, within the token budget. Names are unique because the
stem is the name and the folder is flat.
"""

from __future__ import annotations

from collections.abc import Iterable

from expgit.errors import InvalidInputError, ValidationError
from expgit.git.objects import GITLINK_MODE
from expgit.store.experience import check_experience, decode_experience
from expgit.store.repository import ExperienceRepository


def _checked(repo: ExperienceRepository, path: str) -> bool:
    """Whether ``path`` is one the rules apply to: under the root, not hidden."""
    rel = path[len(repo.root) + 1:] if path.startswith(repo.root + "/") else None
    return not (rel is None or rel.startswith(".") or "/." in rel)


def check_files(repo: ExperienceRepository, files: Iterable[tuple[str, str]],
                gitlinks: Iterable[str] = ()) -> list[str]:
    """Problems of ``(path, blob)`` pairs under the experiences root, and of the
    ``gitlinks`` (submodule entries) there; [] when all valid."""
    files = list(files)
    problems: list[str] = [f"{path}: not an experience file: a submodule (gitlink), "
                           "whose content is in another repository"
                           for path in gitlinks if _checked(repo, path)]
    blobs = repo.git.read_blobs(blob for _, blob in files)
    for path, blob in files:
        if not _checked(repo, path):
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
                ) -> list[tuple[str, str, str]]:
    """``(path, id, mode)`` of the files under the root at ``commit`` (only those changed
    since ``old`` if given)."""
    args = (["diff-tree", "-r", "--no-renames", "--diff-filter=AMT", old, commit]
            if old else ["ls-tree", "-r", commit])
    text = repo.git.out(*args, "--", f"{repo.root}/")
    files = []
    for line in text.splitlines():
        meta, _, path = line.partition("\t")
        fields = meta.split()
        files.append((path, *((fields[3], fields[1]) if old else (fields[2], fields[0]))))
    return files


def _check_entries(repo: ExperienceRepository, entries: list[tuple[str, str, str]]
                   ) -> list[str]:
    """:func:`check_files` of tree entries: a submodule's is no blob to read."""
    return check_files(repo, [(path, sha) for path, sha, mode in entries
                              if mode != GITLINK_MODE],
                       [path for path, _, mode in entries if mode == GITLINK_MODE])


def validate_commit(repo: ExperienceRepository, commit: str, since: str | None = None
                    ) -> list[str]:
    return _check_entries(repo, _tree_files(repo, commit, since))


def validate_index(repo: ExperienceRepository) -> list[str]:
    """Problems of the staged experience files that differ from HEAD."""
    head = repo.git.resolve("HEAD")
    changed = repo.git.out("diff", "--cached", "--name-only", "--no-renames",
                           "--diff-filter=AMT", *([head] if head else []), "--",
                           f"{repo.root}/").splitlines()
    if not changed:
        return []
    staged = repo.git.out("ls-files", "-s", "--", *changed)
    return _check_entries(repo, [(line.partition("\t")[2], line.split()[1], line.split()[0])
                                 for line in staged.splitlines()])


def require_valid(problems: list[str], where: str) -> None:
    if problems:
        raise ValidationError(problems, hint=f"fix the files {where} and try again")
