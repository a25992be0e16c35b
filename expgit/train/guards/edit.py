"""The one guard chain for an edit a model proposed (docs/design.md, "Safety"): the
estimator's edits and the optimizer's merge items go through :func:`guard_edit`, which
runs :mod:`expgit.train.guards.lesson`'s checks in one order: junk (``degenerate``), a
skill name the spec refuses, a secret, an attack on the agent or a copy of the sources,
the caller's checks of the target (``invalid``), then ``cosmetic`` and ``collapse``. A
delete writes no summary, tags or body: only its rationale and name are checked."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from expgit.core.redaction.messages import Redactor
from expgit.errors import InvalidInputError
from expgit.llm.structured import StructuredLLM
from expgit.train.guards.lesson import (
    DEGENERATE,
    LessonRefused,
    RefusalKind,
    check_change,
    check_lesson,
    check_skill_name,
    check_written,
    count_degenerate_reply,
)

__all__ = ["Accepted", "ModelEdit", "Rejected", "RejectionKind", "Rejections", "guard_edit"]

# what a lesson check refused, or "invalid": the caller's own checks of the target
RejectionKind = RefusalKind | Literal["invalid"]


class ModelEdit(Protocol):
    """What the guard reads of a model's edit: the estimator's EstimatedEdit and the
    merge's MergeItem are both one."""

    @property
    def name(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def rationale(self) -> str: ...
    @property
    def summary(self) -> str: ...
    @property
    def tags(self) -> Sequence[str]: ...
    @property
    def body(self) -> str: ...


@dataclass(frozen=True)
class Accepted:
    """An edit that passed: the file as it is (None: new) and as the edit leaves it
    (None: deleted), and a note for the PR body (a shorter copy of its sources)."""

    current: str | None
    content: str | None
    note: str | None = None


@dataclass(frozen=True)
class Rejected:
    """An edit that did not pass: which check refused it, and why (for the record)."""

    kind: RejectionKind
    reason: str

    @classmethod
    def of(cls, exc: InvalidInputError) -> Rejected:
        return cls(exc.kind if isinstance(exc, LessonRefused) else "invalid", exc.message)


# the caller's checks of an edit's target (InvalidInputError to refuse), given the path of
# its file ("" for a delete): the file before the edit (None: new) and after (None: deleted)
Target = Callable[[str], tuple[str | None, str | None]]


def guard_edit(edit: ModelEdit, target: Target, *, path_of: Callable[[str], str],
               sources: Iterable[str], max_copied_words: int,
               shown: frozenset[str] = frozenset(), skills: bool = False,
               rationale_required: bool = True) -> Accepted | Rejected:
    """Run the chain (see the module's docstring) on ``edit``. ``path_of``: the path of
    an experience's file (InvalidInputError for a name that is not valid); ``sources``:
    what the lesson may not copy; ``shown``: the headings the prompt showed
    (:func:`~expgit.train.guards.lesson.headings_shown`)."""
    delete = edit.action == "delete"
    try:
        check_written(rationale=edit.rationale, rationale_required=rationale_required,
                      summary="" if delete else edit.summary,
                      body="" if delete else edit.body, shown=shown, skills=skills)
        path = "" if delete else path_of(edit.name)
        if skills and not delete:
            check_skill_name(edit.name, path)
        fields = [edit.name] if delete else [edit.name, edit.summary, *edit.tags, edit.body]
        note = check_lesson(fields, sources, max_copied_words)
        current, content = target(path)
        if content is not None:
            check_change(current, content, path)
    except InvalidInputError as exc:
        return Rejected.of(exc)
    return Accepted(current, content, note)


@dataclass
class Rejections:
    """The rejected edits of one reply, recorded as both callers report them."""

    redactor: Redactor
    reasons: list[str] = field(default_factory=list)
    junk: int = 0

    def add(self, edit: ModelEdit, rejected: Rejected) -> None:
        if rejected.kind != "invalid":
            self.redactor.counts[rejected.kind] += 1
            self.junk += rejected.kind == DEGENERATE
        self.reasons.append(f"{edit.action} {self.redactor.text(edit.name)!r}: "
                            f"{rejected.reason}")

    def count_all_junk(self, llm: StructuredLLM, stage: str, edits: Sequence[ModelEdit],
                       what: str) -> None:
        """A reply whose every edit was junk counts as a failed call of ``stage``
        (``what``: the edits, e.g. ``"edits of case X"``)."""
        if edits and self.junk == len(edits):
            count_degenerate_reply(llm, stage, f"all {self.junk} {what} were junk")
