"""Values from a user that expgit passes to git on its command line (remotes, refs,
revisions, paths): never read as options.

git takes any argument that starts with ``-`` for an option: a remote named
``--upload-pack=CMD`` given to ``git fetch`` runs CMD. expgit does what git does for its
own untrusted arguments: it ends the options with ``--end-of-options`` (or ``--`` before
paths) ahead of every such value, and, like git's transports, which refuse a URL or host
that starts with ``-`` since CVE-2017-1000117, it refuses such a value outright, before
git runs, naming the option it came from (exit 5).
"""

from __future__ import annotations

from expgit.errors import InvalidInputError

__all__ = ["END_OF_OPTIONS", "operand"]

END_OF_OPTIONS = "--end-of-options"  # git >= 2.24: what follows is never an option


def operand(value: str, option: str) -> str:
    """``value`` unchanged when git cannot mistake it for an option; InvalidInputError
    naming ``option`` (``--remote``, say) when it starts with ``-``, or holds a NUL or a
    line break (no remote, ref or path has one)."""
    if value.startswith("-"):
        raise InvalidInputError(
            f"{option} {value!r} is refused: it starts with '-', so git would read it as "
            "an option", hint=f"give {option} a name that does not start with '-'")
    if any(c in value for c in "\0\n\r"):
        raise InvalidInputError(f"{option} {value!r} is refused: it holds a control "
                                "character")
    return value
