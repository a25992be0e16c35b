"""Checks of Agent Skills folders (``layout = "skills"``): a commit, the index, or the
folders a change touched.

Rules, each refused with the file named: the root holds only ``<name>/`` folders (dot
entries such as ``.gitkeep`` aside); each folder has a ``SKILL.md`` (a regular file) that
passes :func:`expgit.store.format.experience.check_experience` (the spec's front matter, name =
folder, the token budget) and holds no prompt-injection payload (then, with ``[skills]
scanner`` set, passes that scanner); a symlink in a folder points inside it; no file of a folder is
larger than ``[skills] max_file_bytes``. A change is checked folder by folder, whole: a
deleted ``SKILL.md`` leaves a folder that is refused. Past the spec's advice on size (500
lines, 5,000 tokens) :func:`size_warnings` warns.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass

from expgit.errors import InvalidInputError
from expgit.git.objects import GITLINK_MODE, SYMLINK_MODE
from expgit.git.zlist import fields, ls_files_stage, ls_tree
from expgit.store.format.experience import check_experience, decode_experience, estimate_tokens
from expgit.store.format.injection import injection_problem
from expgit.store.format.layout import SKILL_FILE
from expgit.store.format.skill_md import size_warnings
from expgit.store.format.skill_scanner import scan_experiences
from expgit.store.repository import ExperienceRepository


@dataclass(frozen=True)
class TreeFile:
    path: str
    mode: str
    sha: str


def _folders(repo: ExperienceRepository, paths: Iterable[str]) -> list[str]:
    """The pathspecs to check whole for changed ``paths``: their skill folders, and any
    file changed directly under the root."""
    prefix = repo.root + "/"
    found: dict[str, None] = {}
    for path in paths:
        rel = path[len(prefix):] if path.startswith(prefix) else None
        if not rel or rel.startswith("."):
            continue
        folder, slash, _ = rel.partition("/")
        found[prefix + folder + ("/" if slash else "")] = None
    return list(found)


def check_tree_files(repo: ExperienceRepository, files: list[TreeFile], *,
                     whole: bool = True) -> list[str]:
    """Problems of the files of whole skill folders (and of files directly under the
    root); [] when all are valid. ``whole=False``: some files of folders, so a folder
    without its SKILL.md among them is not refused for that."""
    prefix = repo.root + "/"
    folders: dict[str, list[TreeFile]] = {}
    problems: list[str] = []
    for file in files:
        rel = file.path[len(prefix):] if file.path.startswith(prefix) else None
        if not rel or rel.startswith("."):
            continue
        folder, slash, _ = rel.partition("/")
        if not slash:
            problems.append(f"{file.path}: not a skill folder: the {repo.root}/ folder "
                            f"holds only <name>/{SKILL_FILE} skill folders")
            continue
        folders.setdefault(folder, []).append(file)
    links = [f.sha for fs in folders.values() for f in fs if f.mode == SYMLINK_MODE]
    skill_files = [f for name, fs in folders.items() for f in fs
                   if f.path == f"{prefix}{name}/{SKILL_FILE}" and f.mode != SYMLINK_MODE]
    blobs = repo.git.read_blobs([*links, *(f.sha for f in skill_files)])
    sizes = _sizes(repo, [f.sha for fs in folders.values() for f in fs
                          if f.mode not in (SYMLINK_MODE, GITLINK_MODE)])
    limit = repo.settings.skills.max_file_bytes
    valid: list[tuple[str, str, str]] = []  # (path, name, text) for the scanner
    for name, fs in sorted(folders.items()):
        folder = f"{prefix}{name}"
        skill = next((f for f in fs if f.path == f"{folder}/{SKILL_FILE}"), None)
        if skill is None and not whole:
            pass
        elif skill is None or skill.mode in (SYMLINK_MODE, GITLINK_MODE):
            problems.append(f"{folder}/: a skill folder without {SKILL_FILE}")
        else:
            try:
                text = decode_experience(blobs[skill.sha], skill.path)
                check_experience(text, skill.path, name, repo.settings.token_budget)
            except InvalidInputError as exc:
                problems.append(f"{exc.message} ({exc.hint})" if exc.hint else exc.message)
            else:
                attack = injection_problem(text)
                if attack is not None:
                    problems.append(f"{skill.path}: {attack}")
                else:
                    valid.append((skill.path, name, text))
        for f in fs:
            if f.mode == SYMLINK_MODE and _escapes(f.path[len(folder) + 1:], blobs[f.sha]):
                problems.append(f"{f.path}: a symlink that points outside its skill folder")
            elif f.mode == GITLINK_MODE:
                problems.append(f"{f.path}: a submodule inside a skill folder")
            elif f.mode != SYMLINK_MODE and sizes.get(f.sha, 0) > limit:
                problems.append(f"{f.path}: {sizes[f.sha]} bytes, over the limit of {limit} "
                                "per file of a skill ([skills] max_file_bytes)")
    return problems + scan_experiences(repo.settings.skills.scanner, valid)


def check_files(repo: ExperienceRepository, files: list[tuple[str, str]]) -> list[str]:
    """Problems of single ``(path, blob)`` files about to be written (mode 100644): each
    SKILL.md whole, each other file of a folder for its size."""
    prefix = repo.root + "/"
    return check_tree_files(repo, [TreeFile(p, "100644", b) for p, b in files], whole=False) \
        if all(p.startswith(prefix) for p, _ in files) else \
        [f"{p}: not under {prefix}" for p, _ in files if not p.startswith(prefix)]


def _escapes(rel: str, target: bytes) -> bool:
    """Whether a symlink at ``rel`` (inside its folder) to ``target`` leaves the folder."""
    text = target.decode("utf-8", "replace")
    if not text or text.startswith("/") or "\0" in text:
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), text))
    return resolved == ".." or resolved.startswith("../")


def _sizes(repo: ExperienceRepository, shas: list[str]) -> dict[str, int]:
    if not shas:
        return {}
    text = repo.git.out("cat-file", "--batch-check=%(objectname) %(objectsize)",
                        input="".join(f"{sha}\n" for sha in dict.fromkeys(shas)).encode())
    found = {}
    for line in text.splitlines():
        sha, _, size = line.partition(" ")
        if size.isdigit():
            found[sha] = int(size)
    return found


def validate_commit(repo: ExperienceRepository, commit: str, since: str | None = None
                    ) -> list[str]:
    """Problems of the skill folders at ``commit`` (only those changed since ``since``)."""
    specs = [f"{repo.root}/"]
    if since is not None:
        changed = repo.git.run("diff-tree", "-r", "-z", "--name-only", "--no-renames",
                               since, commit, "--", f"{repo.root}/").stdout
        specs = _folders(repo, fields(changed))
        if not specs:
            return []
    listed = repo.git.run("ls-tree", "-r", "-z", "--full-tree", commit, "--", *specs).stdout
    return check_tree_files(repo, [TreeFile(e.path, e.mode, e.sha) for e in ls_tree(listed)])


def validate_index(repo: ExperienceRepository) -> list[str]:
    """Problems of the staged skill folders that differ from HEAD."""
    head = repo.git.resolve("HEAD")
    changed = repo.git.run("diff", "--cached", "-z", "--name-only", "--no-renames",
                           *([head] if head else []), "--", f"{repo.root}/").stdout
    specs = _folders(repo, fields(changed))
    if not specs:
        return []
    staged = repo.git.run("ls-files", "-s", "-z", "--", *specs).stdout
    return check_tree_files(repo, [TreeFile(e.path, e.mode, e.sha)
                                   for e in ls_files_stage(staged)])


def warnings_at(repo: ExperienceRepository, commit: str) -> list[str]:
    """The spec's advice on SKILL.md size, past which a skill is warned about."""
    found = []
    for entry in repo.snapshots.load(commit).entries.values():
        text = entry.data.decode("utf-8", "replace")
        found += size_warnings(text, entry.path, estimate_tokens(text))
    return found
