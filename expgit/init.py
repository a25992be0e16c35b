"""``expgit init``: a new experience repository, optionally seeded from a folder.

The seed folder (such as ``example_repo/``) may hold ``expgit.toml``, the experiences
root and ``.expgit/templates/`` (with nested folders such as ``prompts/``). Everything is
validated before anything is created; the first commit is built in the object database,
then ``main`` is created by CAS.

A symbolic link inside the seed is refused, naming it, and so is anything else that is
not a regular file or folder (a named pipe would block the read). git stores a link as
a link and never commits what it points at; expgit keeps no links at all, so following
one would copy a file from outside the seed (a secret, say) into the first commit.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from expgit.errors import InvalidInputError, UsageError
from expgit.git.repo import GitRepo, RefUpdate
from expgit.hooks.install import install_hooks
from expgit.store.always_on import experience_tree
from expgit.store.experience import check_experience, decode_experience
from expgit.store.layout import SKILL_FILE, Layout
from expgit.store.repository import ExperienceRepository
from expgit.store.settings import SETTINGS_FILE, Settings, parse_settings, render_settings
from expgit.store.templates import OVERRIDE_DIR
from expgit.store.validate import require_valid


@dataclass
class InitResult:
    path: Path
    bare: bool
    commit: str
    experiences: int
    messages: list[str] = field(default_factory=list)


def _not_regular(path: Path) -> str | None:
    """Why ``path`` (not followed if a link) is no regular file or folder; None if it is."""
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        return "a symbolic link (expgit does not follow links out of the seed)"
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "not a regular file"
    return None


def _check_inside(seed: Path, rel: str) -> None:
    """Refuse ``seed/rel`` when it, or a folder on the way there, is a link (or no
    regular file or folder). A path that does not exist passes."""
    path = seed
    for part in Path(rel).parts:
        path = path / part
        if not os.path.lexists(path):
            return
        reason = _not_regular(path)
        if reason is not None:
            raise InvalidInputError(f"{path}: {reason}",
                                    hint="copy the file itself into the seed folder")


def _tree_files(seed: Path, rel: str) -> dict[str, bytes]:
    """``{rel/...: content}`` of every regular file below ``seed/rel``, nested folders
    included, hidden ones (``.DS_Store``) left out; a link or special file is refused."""
    _check_inside(seed, rel)
    top = seed / rel
    if not top.is_dir():
        return {}
    files: dict[str, bytes] = {}
    problems = []
    for folder, dirs, names in os.walk(top):  # never follows a linked folder
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted([*dirs, *(n for n in names if not n.startswith("."))]):
            reason = _not_regular(here / name)
            if reason is not None:
                problems.append(f"{here / name}: {reason}")
            elif name in names:
                files[(here / name).relative_to(seed).as_posix()] = (here / name).read_bytes()
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
    require_valid(problems, f"in {seed}")
    return files


def _seed_files(seed: Path | None) -> tuple[Settings, dict[str, bytes]]:
    """Settings and ``{repo path: content}`` of a seed folder, all validated."""
    if seed is None:
        settings = Settings()
        return settings, {SETTINGS_FILE: render_settings(settings).encode(),
                          f"{settings.experiences_root}/.gitkeep": b""}
    if not seed.is_dir():
        raise InvalidInputError(f"seed folder {seed} does not exist")
    settings_file = seed / SETTINGS_FILE
    _check_inside(seed, SETTINGS_FILE)
    if not settings_file.is_file() and not (seed / Settings().experiences_root).is_dir():
        raise InvalidInputError(
            f"seed folder {seed} holds neither {SETTINGS_FILE} nor an experiences/ folder",
            hint="point --from at a folder laid out like example_repo/")
    settings = (parse_settings(settings_file.read_text(), str(settings_file))
                if settings_file.is_file() else Settings())
    files = {SETTINGS_FILE: settings_file.read_bytes() if settings_file.is_file()
             else render_settings(settings).encode()}
    _check_inside(seed, settings.experiences_root)
    root = seed / settings.experiences_root
    problems: list[str] = []
    if settings.layout == "skills":
        problems = _seed_skills(root, settings, files)
    for path in sorted(root.iterdir()) if root.is_dir() and not problems and \
            settings.layout == "flat" else []:
        rel = f"{settings.experiences_root}/{path.name}"
        if path.name.startswith("."):
            continue
        reason = _not_regular(path)
        if reason is not None:
            problems.append(f"{path}: {reason}")
            continue
        if not path.is_file() or path.suffix != ".md":
            problems.append(f"{path}: not an experience file (<name>.md)")
            continue
        data = path.read_bytes()
        try:
            check_experience(decode_experience(data, str(path)), str(path), path.stem,
                             settings.token_budget)
        except InvalidInputError as exc:
            problems.append(exc.message)
        files[rel] = data
    require_valid(problems, f"in {seed}")
    files |= _tree_files(seed, OVERRIDE_DIR)
    if not any(p.startswith(settings.experiences_root + "/") for p in files):
        files[f"{settings.experiences_root}/.gitkeep"] = b""
    return settings, files


def _seed_skills(root: Path, settings: Settings, files: dict[str, bytes]) -> list[str]:
    """Add the skill folders under ``root`` to ``files`` (every file of each folder);
    their problems, as ``expgit validate`` would report them."""
    problems = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if folder.name.startswith("."):
            continue
        skill = folder / SKILL_FILE
        if not folder.is_dir() or folder.is_symlink():
            problems.append(f"{folder}: not a skill folder (<name>/{SKILL_FILE})")
            continue
        if not skill.is_file() or skill.is_symlink():
            problems.append(f"{folder}: a skill folder without {SKILL_FILE}")
        for path in sorted(folder.rglob("*")):
            if path.is_symlink():
                problems.append(f"{path}: a symlink; a seed's skill folders hold files only")
            elif path.is_file() and path.stat().st_size > settings.skills.max_file_bytes:
                problems.append(f"{path}: over [skills] max_file_bytes "
                                f"({settings.skills.max_file_bytes})")
            elif path.is_file():
                rel = path.relative_to(root).as_posix()
                files[f"{settings.experiences_root}/{rel}"] = path.read_bytes()
        if skill.is_file() and not skill.is_symlink():
            try:
                check_experience(decode_experience(skill.read_bytes(), str(skill)), str(skill),
                                 folder.name, settings.token_budget)
            except InvalidInputError as exc:
                problems.append(exc.message)
    return problems


def init_repository(path: Path, *, bare: bool = False, seed: Path | None = None,
                    hooks: bool = True) -> InitResult:
    settings, files = _seed_files(seed)
    if path.exists() and any(path.iterdir()):
        raise UsageError(f"{path} exists and is not empty",
                         hint="choose a new folder; expgit init creates the repository")
    git = GitRepo.init(path, bare=bare, branch=settings.main_branch)
    try:
        tree = experience_tree(ExperienceRepository(git, settings), None,
                               {p: git.write_blob(d) for p, d in files.items()})
        layout = Layout(settings.layout, settings.experiences_root)
        count = sum(1 for p in files if layout.name_of(p) is not None)
        commit = git.write_commit(tree, [], "expgit: initialise experience repository\n\n"
                                  f"Seeded with {count} experiences"
                                  + (f" from {seed.name}." if seed else "."))
        git.update_refs([RefUpdate(settings.main_ref, commit, None)], "expgit init")
        if not bare:
            git.run("read-tree", "-u", "-m", commit)
        messages = install_hooks(git, server=bare) if hooks else []
        return InitResult(path.resolve(), bare, commit, count, messages)
    finally:
        git.close()
