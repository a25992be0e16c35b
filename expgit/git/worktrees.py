"""Working trees that have a branch checked out follow its move, as ``git merge
--ff-only`` would update them (``git read-tree -m -u OLD NEW``): uncommitted changes to
files the update does not touch are kept; if one would be overwritten, git changes
nothing there and a warning says how to catch up.
"""

from __future__ import annotations

from pathlib import Path

from expgit.git.repo import GitRepo


def _worktrees_on(git: GitRepo, ref: str) -> list[Path]:
    """The working trees that have ``ref`` checked out."""
    if not (git.common_dir / "worktrees").is_dir():
        # no linked worktree (git keeps their admin dirs there): only the main working
        # tree can have it checked out, and its HEAD is read without a process
        if git.work_tree is not None and git.head_symref() == ref:
            return [git.work_tree]
        return []
    text = git.out("worktree", "list", "--porcelain")
    found = []
    for block in text.split("\n\n"):
        fields = dict(line.partition(" ")[::2] for line in block.splitlines() if line)
        if fields.get("branch") == ref and "bare" not in fields and "worktree" in fields:
            found.append(Path(fields["worktree"]))
    return found


def sync_worktrees(git: GitRepo, ref: str, old: str | None, new: str) -> list[str]:
    """Bring the working trees that have ``ref`` checked out from ``old`` to ``new``.

    ``ref`` has already moved when this runs, so nothing here may fail the command: a
    working tree that cannot be updated is left as it was, with a warning that says how
    to catch up without losing its uncommitted changes.
    """
    warnings = []
    branch = ref.removeprefix("refs/heads/")
    for path in _worktrees_on(git, ref):
        why = _sync_one(git, path, old, new)
        if why is None:
            continue
        if not path.is_dir():
            catch_up = "git worktree prune"
        elif old is None:
            catch_up = "git reset --hard (this discards uncommitted changes)"
        else:
            # HEAD already names `new` there, so `git stash` would record the update
            # itself, reversed, as a local change: carry the changes over as a patch
            patch = '"$(git rev-parse --git-path expgit-local.patch)"'
            catch_up = (f"git diff --full-index {old} > {patch} && git reset --hard && "
                        f"git apply --3way {patch}")
        warnings.append(
            f"{branch} moved to {new[:12]}, but the working tree {path} {why}; it was left "
            f"as it was. Catch up with: {catch_up}")
    return warnings


def _sync_one(git: GitRepo, path: Path, old: str | None, new: str) -> str | None:
    """Update one working tree; None on success, else why it was left alone.

    Uncommitted changes are carried over where ``old`` and ``new`` agree, exactly as
    ``git merge --ff-only`` does; git refuses (and changes nothing) if one would be
    overwritten.
    """
    if not path.is_dir():
        return "is missing"
    if old is None:
        return "had no commit of it checked out"
    try:
        git.run("update-index", "-q", "--refresh", cwd=path, check=False)
        proc = git.run("read-tree", "-m", "-u", old, new, cwd=path, check=False)
    except OSError as exc:
        return f"could not be updated ({exc})"
    if proc.returncode == 0:
        return None
    error = proc.stderr.decode(errors="replace").strip().replace("\n", " ")
    return f"has uncommitted changes the update would overwrite ({error})"
