"""``expgit export --to DIR``: the active skills of ``main`` (or a revision) where the
agents read them.

* ``DIR/.agents/skills/<name>/``: each skill's whole folder, every file's exact bytes,
  the executable bit and in-folder symlinks kept (Codex, Copilot, Cursor, Gemini CLI,
  OpenCode and goose read it);
* ``DIR/.claude/skills/<name>``: a relative symlink to that folder (Claude Code reads only
  ``.claude/skills``), as the repositories that share skills between agents do; a copy
  where the file system refuses symlinks; nothing when ``.claude/skills`` already is
  ``.agents/skills`` (a symlink to it);
* the always-on block of ``DIR/AGENTS.md`` (each file of ``[skills] always_on_files``),
  written by :mod:`expgit.store.format.always_on`, the text around it kept. Not at the user
  level (``DIR`` is the home folder): no agent reads ``~/AGENTS.md``.

The manifest ``DIR/.agents/skills/.expgit-export.json`` records what expgit wrote: the
repository, the commit, and per skill its files with their blob ids and modes. From it:

* a second run with nothing new changes no file: every file is compared before it is
  written, and the manifest is written only when it changes;
* a skill that is no longer active on ``main`` (deprecated, draft, deleted) is removed,
  only the files the manifest names;
* a folder that expgit did not write, or a file of an exported folder that changed since
  (its blob id is neither the exported nor the new one), is a clash: ConflictError
  (exit 3) naming the path, and nothing is written -- everything is checked first;
* each file is written to a temporary file in its folder and renamed into place, and the
  manifest is rewritten after each file, so a failure midway leaves a manifest that
  describes what is there (and a file equal to the new one is never a clash).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from expgit.core.jsonl import loads_untrusted
from expgit.errors import ConflictError, InvalidInputError, UsageError
from expgit.git.objects import GITLINK_MODE
from expgit.git.zlist import ls_tree
from expgit.store.folder_files import (
    ExportedFile,
    Files,
    folder_clashes,
    on_disk,
    remove_file,
    write_file,
)
from expgit.store.format import always_on
from expgit.store.format.skill_check import validate_commit
from expgit.store.format.skill_md import check_skill_name
from expgit.store.format.validate import require_valid
from expgit.store.repository import ExperienceRepository

AGENTS_SKILLS = ".agents/skills"
CLAUDE_SKILLS = ".claude/skills"
MANIFEST = ".expgit-export.json"
Action = Literal["added", "updated", "removed", "unchanged"]
ClaudeMode = Literal["symlink", "copy", "shared"]


class ExportedSkill(BaseModel):
    model_config = ConfigDict(extra="forbid")

    files: dict[str, ExportedFile]
    claude: ClaudeMode = "symlink"


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal[1] = 1
    repository: str
    commit: str
    skills: dict[str, ExportedSkill]


@dataclass
class SkillChange:
    name: str
    action: Action


@dataclass
class ExportResult:
    to: Path
    commit: str
    dry_run: bool
    claude: ClaudeMode
    skills: list[SkillChange] = field(default_factory=list)
    always_on: dict[str, str] = field(default_factory=dict)  # path: action or why skipped


class _Exporter:
    def __init__(self, repo: ExperienceRepository, commit: str, to: Path) -> None:
        self.repo = repo
        self.commit = commit
        self.to = to
        self.agents = to / AGENTS_SKILLS
        self.claude = to / CLAUDE_SKILLS
        self.manifest_path = self.agents / MANIFEST
        self.sha_len = len(commit)

    # -------------------------------------------------------------- reading
    def wanted(self) -> tuple[dict[str, Files], dict[str, bytes]]:
        """``({name: files}, {blob: content})`` of the active skills at the commit."""
        repo = self.repo
        require_valid(validate_commit(repo, self.commit), f"at {self.commit[:12]}")
        active = {name for name, entry in repo.snapshot(self.commit).entries.items()
                  if entry.experience.status == "active"}
        listed = repo.git.run("ls-tree", "-r", "-z", "--full-tree", self.commit, "--",
                              f"{repo.root}/").stdout
        skills: dict[str, Files] = {name: {} for name in active}
        for entry in ls_tree(listed):
            owner = repo.layout.owner_of(entry.path)
            if owner not in active or entry.mode == GITLINK_MODE:
                continue
            rel = entry.path[len(f"{repo.root}/{owner}/"):]
            skills[owner][rel] = ExportedFile(blob=entry.sha, mode=entry.mode)  # type: ignore[arg-type]
        blobs = repo.git.read_blobs({f.blob for fs in skills.values() for f in fs.values()})
        return skills, blobs

    def manifest(self) -> Manifest | None:
        if not os.path.lexists(self.manifest_path):
            return None
        where = str(self.manifest_path)
        if self.manifest_path.is_symlink() or not self.manifest_path.is_file():
            raise ConflictError(f"{where}: not a file; expgit did not write it")
        try:
            found = Manifest.model_validate(loads_untrusted(self.manifest_path.read_bytes()))
        except (ValueError, ValidationError):
            raise InvalidInputError(f"{where}: not an expgit export manifest",
                                    hint="move it away to export afresh") from None
        for name, skill in found.skills.items():
            check_skill_name(name, where)
            for rel in skill.files:
                parts = PurePosixPath(rel).parts
                if not rel or rel.startswith("/") or ".." in parts or "\0" in rel:
                    raise InvalidInputError(f"{where}: names a path outside {name}/: {rel!r}")
        source = self._source()
        if found.repository != source:
            raise ConflictError(f"{self.agents}: exported from another repository "
                                f"({found.repository})",
                                hint="export each repository to a folder of its own")
        return found

    def _source(self) -> str:
        return str(self.repo.git.work_tree or self.repo.git.git_dir)

    def claude_mode(self) -> ClaudeMode:
        if self.claude.exists() and self.agents.exists() \
                and self.claude.resolve() == self.agents.resolve():
            return "shared"
        return "copy" if os.name == "nt" else "symlink"

    def link_target(self, name: str) -> str:
        return os.path.relpath(self.agents / name, self.claude)

    # ------------------------------------------------------------- planning
    def plan(self, skills: dict[str, Files], old: Manifest | None, claude: ClaudeMode
             ) -> tuple[list[SkillChange], list[str]]:
        """What changes per skill, and every clash."""
        clashes: list[str] = []
        changes: list[SkillChange] = []
        exported = old.skills if old is not None else {}
        for base in (self.to / ".agents", self.agents, self.to / ".claude", self.claude):
            if os.path.lexists(base) and not base.is_dir():
                clashes.append(f"{base} (not a folder)")
        if clashes:
            return changes, clashes
        for name in sorted(set(skills) | set(exported)):
            wanted = skills.get(name, {})
            before = exported.get(name)
            files = before.files if before is not None else {}
            disk, odd = on_disk(self.agents / name, self.sha_len)
            clashes += folder_clashes(self.agents / name, disk, odd, files, wanted)
            same = disk == wanted
            link = self.claude / name
            mode = "copy" if before is not None and before.claude == "copy" else claude
            if mode == "symlink" and os.path.lexists(link):
                ours = link.is_symlink() and os.readlink(link) == self.link_target(name)
                if not ours and name in skills:
                    clashes.append(f"{link} (not written by expgit)")
            elif mode == "symlink":
                same = same and name not in skills
            elif mode == "copy":
                copy, odd = ({}, [f"{link} (a symlink)"]) if link.is_symlink() \
                    else on_disk(link, self.sha_len)
                copied = files if before is not None and before.claude == "copy" else {}
                clashes += folder_clashes(link, copy, odd, copied, wanted)
                same = same and copy == wanted
            if name not in skills:
                changes.append(SkillChange(name, "removed"))
            elif before is None and not disk:
                changes.append(SkillChange(name, "added"))
            else:
                changes.append(SkillChange(name, "unchanged" if same else "updated"))
        return changes, clashes

    def always_on_plan(self) -> dict[str, bytes | None]:
        """``{file: new bytes, or None when it stays}``; {} at the user level."""
        if self.to.resolve() == Path.home().resolve():
            return {}
        tree = self.repo.git.read_commit(self.commit).tree
        skills = always_on.always_on_skills(self.repo, tree)
        found: dict[str, bytes | None] = {}
        for name in self.repo.settings.skills.always_on_files:
            path = self.to / name
            if os.path.lexists(path) and (path.is_symlink() or not path.is_file()):
                raise ConflictError(f"{path}: not a regular file; expgit writes the "
                                    "always-on block only into a file of its own")
            current = path.read_bytes() if path.is_file() else None
            if not skills and (current is None or always_on.START.encode() not in current):
                continue
            new = always_on.splice(current, always_on.render_block(self.repo, skills, tree),
                                   str(path))
            if new != current:
                always_on.check_size(current, new, str(path))
            found[name] = None if new == current else new
        return found

    # -------------------------------------------------------------- writing
    def save(self, manifest: Manifest) -> None:
        data = (json.dumps(manifest.model_dump(), indent=2, sort_keys=True) + "\n").encode()
        if self.manifest_path.is_file() and self.manifest_path.read_bytes() == data:
            return
        write_file(self.manifest_path, data, "100644")

    def write_folder(self, folder: Path, wanted: Files, blobs: dict[str, bytes],
                     manifest: Manifest, name: str, *, record: bool) -> None:
        """Make ``folder`` hold ``wanted`` (only files that differ are written);
        ``record``: keep the manifest in step, file by file."""
        disk, _ = on_disk(folder, self.sha_len)
        entry = manifest.skills.setdefault(name, ExportedSkill(files={}))
        for rel in sorted(set(disk) - set(wanted)):
            remove_file(folder / rel, folder)
            if record:
                entry.files.pop(rel, None)
                self.save(manifest)
        for rel, want in sorted(wanted.items()):
            if disk.get(rel) != want:
                data = blobs[want.blob]
                write_file(folder / rel, data, want.mode)
            if record and entry.files.get(rel) != want:
                entry.files[rel] = want
                self.save(manifest)


def export_skills(repo: ExperienceRepository, to: Path, *, rev: str | None = None,
                  dry_run: bool = False) -> ExportResult:
    """Export the active skills at ``rev`` (default: the tip of main) into ``to``."""
    if not repo.layout.skills:
        raise UsageError("export writes Agent Skills folders: this repository is in the "
                         "flat layout",
                         hint="migrate it first: expgit migrate --to skills")
    to = to.expanduser()
    if not to.is_dir():
        raise UsageError(f"{to}: no such folder")
    commit = repo.commit(rev) if rev else repo.main_commit()
    job = _Exporter(repo, commit, to)
    skills, blobs = job.wanted()
    old = job.manifest()
    claude = job.claude_mode()
    changes, clashes = job.plan(skills, old, claude)
    if clashes:
        raise ConflictError(f"cannot export into {to}: " + "; ".join(clashes),
                            conflicts=clashes,
                            hint="expgit never overwrites what it did not write: move "
                                 "these away (or rename the skill); nothing was written")
    texts = job.always_on_plan()
    result = ExportResult(to, commit, dry_run, claude, changes,
                          {name: "unchanged" if data is None else "updated"
                           for name, data in texts.items()})
    if not texts and to.resolve() == Path.home().resolve():
        result.always_on = {name: "skipped at the user level"
                            for name in repo.settings.skills.always_on_files}
    if dry_run:
        return result
    manifest = old.model_copy(deep=True) if old is not None \
        else Manifest(repository=job._source(), commit=commit, skills={})
    for change in changes:
        if change.action == "removed":
            _remove_skill(job, manifest, change.name)
    for change in changes:
        if change.action != "removed":
            _write_skill(job, manifest, change.name, skills[change.name], blobs, claude)
    for name, data in texts.items():
        if data is not None:
            write_file(to / name, data, "100644")
    manifest.commit = commit
    job.save(manifest)
    return result


def _remove_skill(job: _Exporter, manifest: Manifest, name: str) -> None:
    before = manifest.skills[name]
    link = job.claude / name
    if before.claude == "symlink" and link.is_symlink() \
            and os.readlink(link) == job.link_target(name):
        link.unlink()
    elif before.claude == "copy":
        for rel in sorted(before.files):
            remove_file(link / rel, link)
    for rel in sorted(before.files):
        remove_file(job.agents / name / rel, job.agents / name)
        del before.files[rel]
        job.save(manifest)
    del manifest.skills[name]
    job.save(manifest)


def _write_skill(job: _Exporter, manifest: Manifest, name: str, files: Files,
                 blobs: dict[str, bytes], claude: ClaudeMode) -> None:
    before = manifest.skills.get(name)
    mode: ClaudeMode = "copy" if before is not None and before.claude == "copy" else claude
    job.write_folder(job.agents / name, files, blobs, manifest, name, record=True)
    entry = manifest.skills[name]
    link = job.claude / name
    if mode == "symlink" and not os.path.lexists(link):
        link.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.symlink(job.link_target(name), link, target_is_directory=True)
        except OSError:  # a file system without symlinks: a copy
            mode = "copy"
    if mode == "copy":
        job.write_folder(link, files, blobs, manifest, name, record=False)
    if entry.claude != mode:
        entry.claude = mode
        job.save(manifest)
