"""Commit messages as expgit writes and reads them: subject, body, git trailers.

Trailers are the last paragraph of ``Key: value`` lines, exactly as ``git
interpret-trailers`` understands them, so ``git log --format=%(trailers)`` shows them too.

Every message is redacted as it is rendered (subject, body and each trailer's value, by
the one redactor :func:`expgit.core.redaction.text.redact_text`): a rationale, an evidence
reference, an endpoint or a title a model wrote never reaches a commit with a secret.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from expgit.core.redaction.text import redact_text
from expgit.errors import InvalidInputError

_TRAILER_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9-]*): ?(.*)")  # a whole line: fullmatch

TARGET = "Expgit-Target"
BASE_VERSION = "Expgit-Base-Version"
BASE_BLOB = "Expgit-Base-Blob"
CONFIDENCE = "Expgit-Confidence"
EVIDENCE = "Expgit-Evidence"
GRADIENT = "Expgit-Gradient"
REBASED_FROM = "Expgit-Rebased-From"
# The proposal id a squash or rebase merge of its PR carries (`expgit pr` writes it into
# the PR body, so a forge's squash commit message keeps it).
PROPOSAL = "Expgit-Proposal"
REVERTS = "Expgit-Reverts"
KIND = "Expgit-Kind"
# A layout migration (`expgit migrate`): the flat root its experiences came from and the
# skills root they went to; versions and `log NAME` follow each name across it.
MIGRATED_FROM = "Expgit-Migrated-From"
MIGRATED_TO = "Expgit-Migrated-To"


@dataclass(frozen=True)
class Message:
    subject: str
    body: str = ""
    trailers: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def values(self, key: str) -> list[str]:
        return [v for k, v in self.trailers if k.lower() == key.lower()]

    def value(self, key: str) -> str | None:
        found = self.values(key)
        return found[0] if found else None

    def render(self) -> str:
        """The commit message, redacted (trailer keys are expgit's own, kept)."""
        parts = [_redacted(self.subject.strip())]
        if self.body.strip():
            parts.append(_redacted(self.body.strip("\n")))
        if self.trailers:
            parts.append("\n".join(f"{k}: {_redacted(v)}" for k, v in self.trailers))
        return "\n\n".join(parts) + "\n"

    def with_trailers(self, *extra: tuple[str, str]) -> Message:
        return Message(self.subject, self.body, self.trailers + tuple(extra))


def _redacted(text: str) -> str:
    return redact_text(text)[0]


def single_line(value: str, what: str) -> str:
    """Trailer values are one line; reject rather than silently mangle."""
    text = value.strip()
    if not text or "\n" in text or "\r" in text:
        raise InvalidInputError(f"{what} must be a single non-empty line: {value!r}")
    return text


def parse_message(text: str) -> Message:
    """Split a commit message as git does: the title paragraph's first line is the subject;
    the trailers are the last paragraph when every line of it is ``Key: value`` and it is
    not the title paragraph itself. Blank lines are lines of whitespace only, as for git.
    """
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    subject = lines[0] if lines else ""
    blanks = [i for i, line in enumerate(lines) if not line.strip()]
    body_lines = lines[1:]
    trailers: tuple[tuple[str, str], ...] = ()
    if blanks:
        block = lines[blanks[-1] + 1:]
        matches = [_TRAILER_RE.fullmatch(line) for line in block]
        if block and all(matches):
            trailers = tuple((m.group(1), m.group(2).strip()) for m in matches if m)
            body_lines = lines[1:blanks[-1]]
    return Message(subject, "\n".join(body_lines).strip("\n"), trailers)


_GIT_REVERT_RE = re.compile(r"This reverts commit ([0-9a-f]{40})")


def reverted_commit(message: Message) -> str | None:
    """The commit a revert undoes: expgit's trailer, or ``git revert``'s own sentence."""
    return message.value(REVERTS) or next(
        (m.group(1) for m in [_GIT_REVERT_RE.search(message.body)] if m), None)


_OURS = re.compile(r"^(Expgit-(?:Gradient|Proposal|Rebased-From)): *(\S+) *$",
                   re.IGNORECASE | re.MULTILINE)


def scattered(message: str) -> Message:
    """``message`` with expgit's gradient and proposal trailers wherever they are.

    A forge may end a squash merge's message with a paragraph of its own
    (``Co-authored-by:``), so the PR body's trailers are no longer the last paragraph
    git and :func:`parse_message` read. Lines of the exact trailer form are taken from
    anywhere (a description's diff lines start with ``+``, ``-`` or a space: never one).
    """
    parsed = parse_message(message)
    _, _, rest = message.partition("\n\n")  # never the subject's paragraph
    found = tuple((m.group(1), m.group(2)) for m in _OURS.finditer(rest))
    if not any(key.lower() == PROPOSAL.lower() for key, _ in found):
        return parsed  # only a squash merge's PR body carries its id
    return Message(parsed.subject, parsed.body, parsed.trailers + tuple(
        t for t in found if t not in parsed.trailers))

