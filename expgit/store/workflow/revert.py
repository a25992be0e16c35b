"""``expgit revert REV``: undo REV's experience changes in a new commit on ``main``.

For each experience REV changed: if ``main`` still holds REV's version, it goes back to
the version before REV (restored, or deleted if REV created it). If later commits changed
it too, a three-way merge (``git merge-file``: base = REV's version, ours = current,
theirs = the version before REV) is tried; a conflict refuses the whole revert clearly
and writes nothing. The commit goes through the same lock and compare-and-swap as apply.

A layout migration (:mod:`expgit.store.migrate`) is undone whole: each moved experience
goes back to its flat file and ``expgit.toml`` to what it was, provided ``main`` still
holds what the migration made; an experience edited since is a conflict.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from expgit.errors import ConflictError, InvalidInputError
from expgit.git.repo import GitRepo
from expgit.store.format import trailers as tr
from expgit.store.format.always_on import experience_tree
from expgit.store.format.settings import SETTINGS_FILE, Settings, parse_settings
from expgit.store.format.validate import check_files, require_valid
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.changes import FileChange, path_blobs, tree_changes
from expgit.store.workflow.publish import publish


@dataclass
class RevertResult:
    reverted: str
    commit: str
    previous: str
    experiences: list[str]
    merged: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _merge_text(git: GitRepo, base: bytes, ours: bytes, theirs: bytes) -> bytes | None:
    """Three-way merge of file contents; None on conflict."""
    with tempfile.TemporaryDirectory(prefix="expgit-merge-") as tmp:
        paths = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            path = Path(tmp) / name
            path.write_bytes(data)
            paths.append(str(path))
        proc = git.run("merge-file", "-p", "-q", *paths, check=False)
    return proc.stdout if proc.returncode == 0 else None


def reverted_blob(git: GitRepo, change: FileChange, current: str | None
                  ) -> tuple[str | None, bool]:
    """(blob main should hold after the revert, merged?) for one change of REV."""
    if current == change.new_blob:
        return change.old_blob, False
    if current == change.old_blob:  # already back to the version before REV
        return current, False
    if change.old_blob is None or change.new_blob is None or current is None:
        raise ConflictError(f"{change.name}: changed again after the reverted commit")
    data = git.read_blobs([change.new_blob, current, change.old_blob])
    merged = _merge_text(git, data[change.new_blob], data[current], data[change.old_blob])
    if merged is None:
        raise ConflictError(f"{change.name}: later edits conflict with the revert")
    return git.write_blob(merged), True


def revert(repo: ExperienceRepository, rev: str) -> RevertResult:
    target = repo.commit(rev)
    with repo.lock(f"expgit revert {rev}").held():
        main = repo.main_commit()
        if not repo.git.is_ancestor(target, main):
            # A proposal applied onto a moved main lives there as its rebuilt commit.
            rebuilt = repo.git.out("log", "--first-parent", "--format=%H", "-F",
                                   f"--grep={tr.REBASED_FROM}: {target}", main).split()
            if not rebuilt:
                raise InvalidInputError(f"{rev} is not in the history of "
                                        f"{repo.settings.main_branch}; nothing to revert")
            target = rebuilt[-1]
        info = repo.git.read_commit(target)
        parent = info.parents[0] if info.parents else None
        changes = tree_changes(repo.git, parent, target, repo.layout)
        if not changes:
            raise InvalidInputError(f"{rev} changed no experience; nothing to revert")
        current = path_blobs(repo.git, main, (p for c in changes for p in c.before))
        edits: dict[str, str | None] = {}
        merged, conflicts = [], []
        for change in changes:
            if change.old_path is not None or change.path == SETTINGS_FILE:
                # a layout move: undone whole, or not at all
                if all(current.get(p) == b for p, b in change.after.items()):
                    edits |= change.before
                elif any(current.get(p) != b for p, b in change.before.items()):
                    conflicts.append(f"{change.name}: changed again after the reverted "
                                     "commit")
                continue
            try:
                blob, was_merged = reverted_blob(repo.git, change,
                                                  current.get(change.path))
            except ConflictError as exc:
                conflicts.append(exc.message)
                continue
            if blob != current.get(change.path):
                edits[change.path] = blob
            if was_merged:
                merged.append(change.name)
        if conflicts:
            raise ConflictError(f"cannot revert {target[:12]}: " + "; ".join(conflicts),
                                conflicts=conflicts,
                                hint="revert the later commits first, or edit by hand")
        if not edits:
            raise InvalidInputError(f"{rev} is already undone on "
                                    f"{repo.settings.main_branch}; nothing to revert")
        result = repo
        if SETTINGS_FILE in edits:  # the revert of a migration: checked as it will be read
            restored = edits[SETTINGS_FILE]
            result = ExperienceRepository(repo.git, parse_settings(
                repo.git.read_blob(restored).decode("utf-8", "replace"))
                if restored else Settings())
        require_valid(check_files(result, [(p, b) for p, b in edits.items()
                                           if b and p != SETTINGS_FILE]),
                      "that the revert would produce")
        subject = tr.parse_message(info.message).subject
        message = tr.Message(f'Revert "{subject}"', f"This reverts commit {target}.",
                             ((tr.REVERTS, target),))
        if result is not repo:  # a migration's always-on files come back as they were
            edits |= _restored_always_on(repo, parent, target, main)
        tree = experience_tree(result, repo.git.read_commit(main).tree, edits)
        commit = repo.git.write_commit(tree, [main], message.render())
        warnings = publish(repo, commit, main, [], f"expgit revert {target[:12]}")
        names = list(dict.fromkeys(c.name for c in changes if c.path != SETTINGS_FILE
                                   and any(p in edits for p in c.after)))
        return RevertResult(target, commit, main, names, merged, warnings)


def _restored_always_on(repo: ExperienceRepository, parent: str | None, target: str,
                        main: str) -> dict[str, str | None]:
    """The always-on files (``AGENTS.md``, ...) that ``target`` changed and ``main``
    still holds as it left them, each back as it was before ``target``."""
    paths = repo.settings.skills.always_on_files
    before = path_blobs(repo.git, parent, paths)
    after = path_blobs(repo.git, target, paths)
    now = path_blobs(repo.git, main, paths)
    return {p: before.get(p) for p in paths
            if before.get(p) != after.get(p) and now.get(p) == after.get(p)}
