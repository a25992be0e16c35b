"""Where an experience lives in the tree: the one mapping of names to paths and back.

* ``flat`` (no ``layout`` key in ``expgit.toml``): ``<root>/<name>.md``, one file each.
* ``skills``: ``<root>/<name>/SKILL.md``, an Agent Skills folder; the other files of the
  folder (``references/``, ``scripts/``, ``assets/``, ``evals/``) belong to the skill.

An experience's *unit* is what is created, deleted and versioned as one: the file in the
flat layout, the folder in the skills layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from expgit.store.format.experience import check_name

SKILL_FILE = "SKILL.md"
LayoutKind = Literal["flat", "skills"]


@dataclass(frozen=True)
class Layout:
    kind: LayoutKind
    root: str

    @property
    def skills(self) -> bool:
        return self.kind == "skills"

    def file_name(self, name: str) -> str:
        """The experience file of ``name``, relative to the root."""
        return f"{name}/{SKILL_FILE}" if self.skills else f"{name}.md"

    def path_of(self, name: str) -> str:
        """The repository path of experience ``name``'s file; raises InvalidInputError
        for a name that is not valid."""
        return f"{self.root}/{self.file_name(check_name(name))}"

    def unit_of(self, name: str) -> str:
        """What is deleted as one: the file (flat) or the skill folder."""
        return f"{self.root}/{check_name(name)}" if self.skills else self.path_of(name)

    def name_of(self, path: str) -> str | None:
        """The name whose experience file ``path`` is, or None if it is not one."""
        rel = self.relative(path)
        if rel is None:
            return None
        if self.skills:
            folder, slash, file = rel.partition("/")
            return folder if slash and file == SKILL_FILE and folder else None
        if "/" in rel or not rel.endswith(".md") or rel == ".md":
            return None
        return rel[:-3]

    def owner_of(self, path: str) -> str | None:
        """The experience a path under the root belongs to (a skill's asset belongs to
        its skill), or None for a path outside every experience."""
        if not self.skills:
            return self.name_of(path)
        rel = self.relative(path)
        folder, slash, _ = (rel or "").partition("/")
        return folder if slash and folder else None

    def relative(self, path: str) -> str | None:
        """``path`` relative to the root; None outside it or for a hidden path (a
        dotfile such as ``.gitkeep``, or anything in a dot folder)."""
        prefix = self.root + "/"
        if not path.startswith(prefix):
            return None
        rel = path[len(prefix):]
        return None if not rel or rel.startswith(".") or "/." in rel else rel
