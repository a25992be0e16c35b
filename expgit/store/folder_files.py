"""Files of folders that expgit exports (:mod:`expgit.store.skill_export`): what a folder
holds as git would name it (blob ids and modes), what in it expgit would overwrite
without having written it, and atomic writes and removals of single files."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from expgit.errors import ConflictError
from expgit.git.objects import SYMLINK_MODE

EXECUTABLE = "100755"


class ExportedFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    blob: str
    mode: Literal["100644", "100755", "120000"]


Files = dict[str, ExportedFile]  # path inside the skill folder: what it holds



def blob_id(data: bytes, sha_len: int) -> str:
    algorithm = hashlib.sha256 if sha_len == 64 else hashlib.sha1
    return algorithm(b"blob %d\0" % len(data) + data).hexdigest()


def on_disk(folder: Path, sha_len: int) -> tuple[Files, list[str]]:
    """What ``folder`` holds (``{}`` when it is not there), and what is neither a file
    nor a symlink (named as a clash)."""
    found: Files = {}
    odd: list[str] = []
    if not folder.is_dir() or folder.is_symlink():
        if os.path.lexists(folder):
            odd.append(str(folder))
        return found, odd
    for here, dirs, names in os.walk(folder):
        for name in [*dirs, *names]:
            path = Path(here) / name
            rel = path.relative_to(folder).as_posix()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                target = os.fsencode(os.readlink(path))
                found[rel] = ExportedFile(blob=blob_id(target, sha_len), mode="120000")
            elif stat.S_ISREG(info.st_mode):
                mode = EXECUTABLE if info.st_mode & stat.S_IXUSR else "100644"
                found[rel] = ExportedFile(blob=blob_id(path.read_bytes(), sha_len),
                                          mode=mode)  # type: ignore[arg-type]
            elif not stat.S_ISDIR(info.st_mode):
                odd.append(str(path))
    return found, odd


def folder_clashes(folder: Path, disk: Files, odd: list[str], exported: Files, wanted: Files
             ) -> list[str]:
    """The paths of ``folder`` that expgit would overwrite or remove without having
    written them: a file that is neither as exported nor as wanted, or gone."""
    found = list(odd)
    for rel, held in sorted(disk.items()):
        if held != exported.get(rel) and held != wanted.get(rel):
            why = "changed since the export" if rel in exported else "not written by expgit"
            found.append(f"{folder / rel} ({why})")
    for rel in sorted(exported):
        if rel not in disk and rel in wanted and exported[rel] == wanted[rel]:
            found.append(f"{folder / rel} (deleted since the export)")
    return found


def write_file(path: Path, data: bytes, mode: str) -> None:
    """Write one file atomically: a temporary file in the same folder, renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        raise ConflictError(f"{path}: a folder where expgit writes a file")
    if mode == SYMLINK_MODE:
        tmp = path.parent / f".{path.name}.expgit-tmp"
        if os.path.lexists(tmp):
            tmp.unlink()
        os.symlink(os.fsdecode(data), tmp)
        os.replace(tmp, path)
        return
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(name, 0o755 if mode == EXECUTABLE else 0o644)
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def remove_file(path: Path, folder: Path) -> None:
    """Remove ``path`` and the folders it leaves empty, up to and with ``folder``."""
    if os.path.lexists(path):
        path.unlink()
    parent = path.parent
    while True:
        try:
            parent.rmdir()
        except OSError:
            return
        if parent == folder:
            return
        parent = parent.parent
