"""``expgit init``: a new experience repository, optionally seeded from a folder; or
expgit added to an existing code repository in one commit.

A new repository takes the skills layout (``layout = "skills"``, root ``skills/``)
unless ``layout="flat"``. The seed folder (such as ``example_repo/``) may hold
``expgit.toml``, the experiences root in either layout and ``.expgit/templates/`` (with
nested folders such as ``prompts/``); a seed in the other layout is converted on the way
in, with the SKILL.md codec's field mapping. Everything is validated before anything is
created; the first commit is built in the object database, then ``main`` is created by
CAS. Inside a code repository the commit goes on top of the checked-out branch, by CAS
too, and adds only ``expgit.toml``, ``.agents/skills/`` and the ``.claude/skills`` link.

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

from expgit.errors import ConflictError, InvalidInputError, UsageError
from expgit.git.objects import SYMLINK_MODE
from expgit.git.repo import GitRepo, RefUpdate
from expgit.git.worktrees import sync_worktrees
from expgit.hooks.install import install_hooks
from expgit.store.format.always_on import experience_tree, with_always_on
from expgit.store.format.experience import (
    check_experience,
    decode_experience,
    in_layout,
    parse_experience,
)
from expgit.store.format.layout import SKILL_FILE, Layout, LayoutKind
from expgit.store.format.settings import (
    SETTINGS_FILE,
    Settings,
    parse_settings,
    render_settings,
    with_top_keys,
)
from expgit.store.format.templates import OVERRIDE_DIR
from expgit.store.format.validate import require_valid
from expgit.store.repository import ExperienceRepository

SKILLS_ROOT = "skills"  # the skills root of a new repository of its own
CODE_SKILLS_ROOT = ".agents/skills"  # ... inside a code repository: what the agents read
CLAUDE_LINK = ".claude/skills"  # Claude Code reads only .claude/skills: a link to them
CLAUDE_TARGET = "../.agents/skills"


@dataclass
class InitResult:
    path: Path
    bare: bool
    commit: str
    experiences: int
    messages: list[str] = field(default_factory=list)
    # inside a code repository: the working tree could not follow the new commit
    warnings: list[str] = field(default_factory=list)
    added_to: str | None = None  # inside a code repository: the branch it committed to


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


def _source_settings(seed: Path) -> tuple[Settings, str | None]:
    """A seed folder's settings and the text of its ``expgit.toml`` (None when it has
    none: then its layout is read from its folders, ``experiences/`` or ``skills/``)."""
    if not seed.is_dir():
        raise InvalidInputError(f"seed folder {seed} does not exist")
    settings_file = seed / SETTINGS_FILE
    _check_inside(seed, SETTINGS_FILE)
    if settings_file.is_file():
        text = decode_experience(settings_file.read_bytes(), str(settings_file))
        return parse_settings(text, str(settings_file)), text
    found: tuple[tuple[str, LayoutKind], ...] = ((Settings().experiences_root, "flat"),
                                                 (SKILLS_ROOT, "skills"))
    for folder, kind in found:
        _check_inside(seed, folder)
        if (seed / folder).is_dir():
            return Settings(experiences_root=folder, layout=kind), None
    raise InvalidInputError(
        f"seed folder {seed} holds none of {SETTINGS_FILE}, experiences/ and skills/",
        hint="point --from at a folder laid out like example_repo/")


def _seed_files(seed: Path) -> tuple[Settings, str | None, dict[str, bytes]]:
    """A seed folder's settings, its ``expgit.toml`` text, and ``{repo path: content}``
    of its experiences (in its own layout) and templates, all validated."""
    settings, text = _source_settings(seed)
    files: dict[str, bytes] = {}
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
    return settings, text, files


def _target(seed: Path | None, kind: LayoutKind, root: str | None = None,
            branch: str | None = None) -> tuple[Settings, dict[str, bytes]]:
    """The settings and ``{repo path: content}`` of a new repository in layout ``kind``
    (with ``root`` and ``branch`` when given), from ``seed``: a seed in the other layout
    (or with another root) is converted on the way in, each file checked where it goes."""
    source, text, found = (Settings(), None, {}) if seed is None else _seed_files(seed)
    default = {"flat": Settings().experiences_root, "skills": SKILLS_ROOT}
    if root is None:  # the seed's own root, unless it is the other layout's default
        root = (default[kind] if source.experiences_root == default[source.layout]
                else source.experiences_root)
    values = {"layout": kind, "experiences_root": root, "main_branch": branch}
    changed = {k: v for k, v in values.items()
               if v is not None and v != getattr(source, k)}
    if text is None:
        text = render_settings(source.model_copy(update=changed))
    elif changed:
        text = with_top_keys(text, changed, f"{seed}/{SETTINGS_FILE}")
    settings = parse_settings(text)
    src = Layout(source.layout, source.experiences_root)
    dst = Layout(settings.layout, settings.experiences_root)
    files = {SETTINGS_FILE: text.encode()}
    problems = []
    for path, data in found.items():
        rel = path.removeprefix(src.root + "/")
        name = src.name_of(path)
        where = f"{seed}/{path}"
        if rel == path:
            files[path] = data  # a template
        elif rel.startswith("."):
            continue  # a dotfile of the root, such as .gitkeep
        elif name is None and not dst.skills:
            problems.append(f"{where}: a skill's other file has no place in the flat "
                            "layout (which holds <name>.md files only)")
        elif name is None:
            files[f"{dst.root}/{rel}"] = data
        elif src.kind == dst.kind:
            files[dst.path_of(name)] = data
        else:
            try:
                exp = parse_experience(decode_experience(data, where), where)
                new = in_layout(exp, dst.skills, where).render()
                check_experience(new, dst.path_of(name), name, settings.token_budget)
            except InvalidInputError as exc:
                problems.append(f"{exc.message} (converted from {where})")
                continue
            files[dst.path_of(name)] = new.encode()
    require_valid(problems, f"in {seed}")
    if not any(p.startswith(dst.root + "/") for p in files):
        files[f"{dst.root}/.gitkeep"] = b""
    return settings, files


def _seed_skills(root: Path, settings: Settings, files: dict[str, bytes]) -> list[str]:
    """Add the skill folders under ``root`` to ``files`` (every file of each folder);
    their problems, as ``expgit validate`` would report them."""
    problems = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if folder.name.startswith("."):
            continue
        skill = folder / SKILL_FILE
        reason = _not_regular(folder)
        if reason is not None or not folder.is_dir():
            problems.append(f"{folder}: {reason or f'not a skill folder (<name>/{SKILL_FILE})'}")
            continue
        if not skill.is_file() or skill.is_symlink():
            problems.append(f"{folder}: a skill folder without {SKILL_FILE}")
        for path in sorted(folder.rglob("*")):
            reason = _not_regular(path)
            if reason is not None:
                problems.append(f"{path}: {reason}")
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
                    hooks: bool = True, layout: LayoutKind | None = None) -> InitResult:
    """A new experience repository at ``path`` (``layout``: skills unless given), or,
    when ``path`` is the top of a git repository with commits, expgit added to it
    (:func:`add_to_code_repository`)."""
    if path.exists() and any(path.iterdir()):
        if os.path.lexists(path / ".git") and not bare:
            return add_to_code_repository(path, seed=seed, hooks=hooks, layout=layout)
        raise UsageError(f"{path} exists and is not empty",
                         hint="choose a new folder (expgit init creates the repository), "
                         "or the top folder of a git repository with commits")
    settings, files = _target(seed, layout or "skills")
    git = GitRepo.init(path, bare=bare, branch=settings.main_branch)
    try:
        tree = experience_tree(ExperienceRepository(git, settings), None,
                               {p: git.write_blob(d) for p, d in files.items()})
        count = _count(settings, files)
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


def _count(settings: Settings, files: dict[str, bytes]) -> int:
    layout = Layout(settings.layout, settings.experiences_root)
    return sum(1 for p in files if layout.name_of(p) is not None)


def add_to_code_repository(path: Path, *, seed: Path | None, hooks: bool,
                           layout: LayoutKind | None) -> InitResult:
    """Add expgit to the git repository whose top folder is ``path``, in one commit on
    the branch HEAD names: ``expgit.toml``, the skills under ``.agents/skills/``, and
    ``.claude/skills`` as a relative symlink to them (Claude Code reads only that). The
    commit is built as objects and the branch moved by compare-and-swap; the working
    tree then follows as ``git merge --ff-only`` would, or is left with a warning. No
    other path changes; a path that is already there is refused (exit 3)."""
    if layout == "flat":
        raise UsageError("a code repository gets the skills layout (.agents/skills/, "
                         "which the coding agents read); leave out --layout flat")
    git = GitRepo.discover(path)
    try:
        if git.work_tree is None or git.work_tree.resolve() != path.resolve():
            raise UsageError(f"{path} is not the top folder of its git repository",
                             hint=f"run expgit init in {git.work_tree or git.git_dir}")
        ref = git.head_symref()
        old = git.resolve("HEAD")
        if ref is None or old is None:
            raise UsageError(f"{path}: HEAD " + ("is detached" if ref is None
                             else "names a branch with no commits yet"),
                             hint="check out the branch expgit should train (main), "
                             "with at least one commit")
        base = git.read_commit(old).tree
        if git.path_entry(base, SETTINGS_FILE) is not None:
            raise UsageError(f"{path} is already an experience repository (its "
                             f"{git.head_symref()} holds {SETTINGS_FILE})")
        branch = ref.removeprefix("refs/heads/")
        settings, files = _target(seed, "skills", CODE_SKILLS_ROOT, branch)
        for new_path in [*files, CLAUDE_LINK]:
            _refuse_taken(git, base, new_path)
        blobs = {p: git.write_blob(d) for p, d in files.items()}
        blobs[CLAUDE_LINK] = git.write_blob(CLAUDE_TARGET.encode())
        # the always-on skills' block of AGENTS.md comes in the same commit (text outside
        # the block keeps its bytes)
        tree = with_always_on(ExperienceRepository(git, settings),
                              git.edit_tree(base, blobs, {CLAUDE_LINK: SYMLINK_MODE}))
        count = _count(settings, files)
        commit = git.write_commit(tree, [old], "expgit: add the experience repository\n\n"
                                  f"{count} skills in {CODE_SKILLS_ROOT}/"
                                  + (f", from {seed.name}" if seed else "")
                                  + f"; {CLAUDE_LINK} links to them for Claude Code.")
        git.update_refs([RefUpdate(ref, commit, old)], "expgit init")
        warnings = sync_worktrees(git, ref, old, commit)
        messages = install_hooks(git, server=False) if hooks else []
        return InitResult(path.resolve(), False, commit, count, messages, warnings, branch)
    finally:
        git.close()


def _refuse_taken(git: GitRepo, tree: str, path: str) -> None:
    """Refuse (exit 3) a path the commit would add when it, or a file on the way to
    it, is already in ``tree``: adding expgit changes no path that is there."""
    parts = path.split("/")
    for depth in range(1, len(parts) + 1):
        here = "/".join(parts[:depth])
        entry = git.path_entry(tree, here)
        if entry is None:
            return
        if depth == len(parts) or not entry.is_tree:
            raise ConflictError(f"{here} is already in the repository; expgit init adds "
                                "it and changes nothing that is there",
                                hint="move it aside in a commit of its own, then run "
                                "expgit init again")
