"""Checks of experience files at a commit, in the index, or between two commits.

Rules: each file under the experiences root is ``<name>.md`` (no folders, no other
files; dotfiles such as ``.gitkeep`` are ignored), UTF-8, with valid front matter whose
``name`` equals the file stem, within the token budget. Names are unique because the
stem is the name and the folder is flat. An experience holding a prompt-injection payload
(:mod:`expgit.store.format.injection`) is a problem too, and with ``[skills] scanner`` set, the
valid ones are scanned by that scanner (:mod:`expgit.store.format.skill_scanner`).

The template overrides of a commit (``.expgit/templates/``) must each render once in the
sandbox (:func:`expgit.store.format.templates.check_overrides`): they are code every trainer
runs, so ``validate`` and the hooks refuse one that does not.
"""

from __future__ import annotations

from collections.abc import Iterable

from expgit.errors import InvalidInputError, ValidationError
from expgit.git.objects import EMPTY_TREE, GITLINK_MODE
from expgit.git.zlist import ls_tree, raw_diff, shown_path
from expgit.store.format import skill_check
from expgit.store.format.experience import check_experience, check_name, decode_experience
from expgit.store.format.injection import injection_problem
from expgit.store.format.skill_scanner import scan_experiences
from expgit.store.format.templates import OVERRIDE_DIR, check_overrides
from expgit.store.repository import ExperienceRepository


def _checked(repo: ExperienceRepository, path: str) -> bool:
    """Whether ``path`` is one the rules apply to: under the root, not hidden."""
    rel = path[len(repo.root) + 1:] if path.startswith(repo.root + "/") else None
    return not (rel is None or rel.startswith(".") or "/." in rel)


def check_files(repo: ExperienceRepository, files: Iterable[tuple[str, str]],
                gitlinks: Iterable[str] = ()) -> list[str]:
    """Problems of ``(path, blob)`` pairs under the experiences root, and of the
    ``gitlinks`` (submodule entries) there; [] when all valid. A path is named as git
    shows it (quoted when it holds a tab, a quote, a newline)."""
    files = list(files)
    if repo.layout.skills:
        return skill_check.check_files(repo, files)
    problems: list[str] = [f"{shown_path(path)}: not an experience file: a submodule "
                           "(gitlink), whose content is in another repository"
                           for path in gitlinks if _checked(repo, path)]
    valid: list[tuple[str, str, str]] = []  # (path, name, text)
    blobs = repo.git.read_blobs(blob for _, blob in files)
    for path, blob in files:
        if not _checked(repo, path):
            continue
        name = repo.name_of(path)
        shown = shown_path(path)
        if name is None:
            problems.append(f"{shown}: not an experience file: the {repo.root}/ folder holds "
                            "only <name>.md files, with no sub-folders")
            continue
        try:
            check_name(name)
            text = decode_experience(blobs[blob], shown)
            check_experience(text, shown, name, repo.settings.token_budget)
        except InvalidInputError as exc:
            message = exc.message if exc.message.startswith(shown) \
                else f"{shown}: {exc.message}"
            problems.append(f"{message} ({exc.hint})" if exc.hint else message)
            continue
        attack = injection_problem(text)
        if attack is not None:
            problems.append(f"{shown}: {attack}")
            continue
        valid.append((path, name, text))
    return problems + scan_experiences(repo.settings.skills.scanner, valid)


def _tree_files(repo: ExperienceRepository, commit: str, old: str | None = None
                ) -> list[tuple[str, str, str]]:
    """``(path, id, mode)`` of the files under the root at ``commit`` (only those changed
    since ``old`` if given)."""
    root = f"{repo.root}/"
    if old:
        raw = repo.git.run("diff-tree", "-r", "-z", "--raw", "--no-renames",
                           "--diff-filter=AMT", old, commit, "--", root).stdout
        return [(c.path, c.new_sha, c.new_mode) for c in raw_diff(raw)]
    listed = repo.git.run("ls-tree", "-r", "-z", commit, "--", root).stdout
    return [(entry.path, entry.sha, entry.mode) for entry in ls_tree(listed)]


def _check_entries(repo: ExperienceRepository, entries: list[tuple[str, str, str]]
                   ) -> list[str]:
    """:func:`check_files` of tree entries: a submodule's is no blob to read."""
    return check_files(repo, [(path, sha) for path, sha, mode in entries
                              if mode != GITLINK_MODE],
                       [path for path, _, mode in entries if mode == GITLINK_MODE])


def validate_commit(repo: ExperienceRepository, commit: str, since: str | None = None
                    ) -> list[str]:
    """Problems of the experience files at ``commit`` (those changed since ``since``,
    if given) and of every template override there."""
    overrides = check_overrides(repo, repo.git.read_commit(commit).tree)
    if repo.layout.skills:
        return skill_check.validate_commit(repo, commit, since) + overrides
    return _check_entries(repo, _tree_files(repo, commit, since)) + overrides


def validate_index(repo: ExperienceRepository) -> list[str]:
    """Problems of the staged experience files that differ from HEAD."""
    if repo.layout.skills:
        return skill_check.validate_index(repo)
    head = repo.git.resolve("HEAD")
    raw = repo.git.run("diff-index", "--cached", "-z", "--raw", "--no-renames",
                       "--diff-filter=AMT", head or EMPTY_TREE, "--", f"{repo.root}/").stdout
    return _check_entries(repo, [(c.path, c.new_sha, c.new_mode) for c in raw_diff(raw)])


def validate_staged_templates(repo: ExperienceRepository) -> list[str]:
    """Problems of the staged template overrides, when any differs from HEAD: the index
    as a tree (``git write-tree`` writes tree objects, never the index) is checked."""
    head = repo.git.resolve("HEAD")
    changed = repo.git.out("diff", "--cached", "--name-only", "-z", "--no-renames",
                           *([head] if head else []), "--", f"{OVERRIDE_DIR}/")
    return check_overrides(repo, repo.git.out("write-tree").strip()) if changed else []


def require_valid(problems: list[str], where: str) -> None:
    if problems:
        raise ValidationError(problems, hint=f"fix the files {where} and try again")
