"""Checks of experience files at a commit, in the index, or between two commits.

Rules: each file under the experiences root is ``<name>.md`` (no folders, no other
files; dotfiles such as ``.gitkeep`` are ignored), UTF-8, with valid front matter whose
``name`` equals the file stem, within the token budget. Names are unique because the
stem is the name and the folder is flat.
"""

from __future__ import annotations

from collections.abc import Iterable

from expgit.errors import InvalidInputError, ValidationError
from expgit.git.objects import EMPTY_TREE
from expgit.git.zlist import ls_tree, raw_diff, shown_path
from expgit.store.experience import check_experience, check_name, decode_experience
from expgit.store.repository import ExperienceRepository


def check_files(repo: ExperienceRepository, files: Iterable[tuple[str, str]]) -> list[str]:
    """Problems of ``(path, blob)`` pairs under the experiences root; [] when all valid.
    A path is named as git shows it (quoted when it holds a tab, a quote, a newline)."""
    files = list(files)
    problems: list[str] = []
    blobs = repo.git.read_blobs(blob for _, blob in files)
    for path, blob in files:
        rel = path[len(repo.root) + 1:] if path.startswith(repo.root + "/") else None
        if rel is None or rel.startswith(".") or "/." in rel:
            continue
        name = repo.name_of(path)
        shown = shown_path(path)
        if name is None:
            problems.append(f"{shown}: not an experience file: the {repo.root}/ folder holds "
                            "only <name>.md files, with no sub-folders")
            continue
        try:
            check_name(name)
            check_experience(decode_experience(blobs[blob], shown), shown, name,
                             repo.settings.token_budget)
        except InvalidInputError as exc:
            message = exc.message if exc.message.startswith(shown) \
                else f"{shown}: {exc.message}"
            problems.append(f"{message} ({exc.hint})" if exc.hint else message)
    return problems


def _tree_files(repo: ExperienceRepository, commit: str, old: str | None = None
                ) -> list[tuple[str, str]]:
    """Files under the root at ``commit`` (only those changed since ``old`` if given)."""
    root = f"{repo.root}/"
    if old:
        raw = repo.git.run("diff-tree", "-r", "-z", "--raw", "--no-renames",
                           "--diff-filter=AMT", old, commit, "--", root).stdout
        return [(change.path, change.new_sha) for change in raw_diff(raw)]
    listed = repo.git.run("ls-tree", "-r", "-z", commit, "--", root).stdout
    return [(entry.path, entry.sha) for entry in ls_tree(listed)]


def validate_commit(repo: ExperienceRepository, commit: str, since: str | None = None
                    ) -> list[str]:
    return check_files(repo, _tree_files(repo, commit, since))


def validate_index(repo: ExperienceRepository) -> list[str]:
    """Problems of the staged experience files that differ from HEAD."""
    head = repo.git.resolve("HEAD")
    raw = repo.git.run("diff-index", "--cached", "-z", "--raw", "--no-renames",
                       "--diff-filter=AMT", head or EMPTY_TREE, "--", f"{repo.root}/").stdout
    return check_files(repo, [(change.path, change.new_sha) for change in raw_diff(raw)])


def require_valid(problems: list[str], where: str) -> None:
    if problems:
        raise ValidationError(problems, hint=f"fix the files {where} and try again")
