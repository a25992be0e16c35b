"""Shell completion of the ids of open proposals and gradients (see docs/workflow.md,
"Shell completion"). A completion never fails the shell: any error completes nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
from click.shell_completion import CompletionItem

from expgit.store.refnames import GRADIENTS, PROPOSALS
from expgit.store.repository import ExperienceRepository

Completer = Callable[[click.Context, click.Parameter, str], list[CompletionItem]]
_PREFIXES = {"proposal": PROPOSALS, "gradient": GRADIENTS}


def open_ids(*kinds: str) -> Completer:
    """Completes the ids of the open items of ``kinds`` ("proposal", "gradient")."""

    def complete(ctx: click.Context, _param: click.Parameter, incomplete: str
                 ) -> list[CompletionItem]:
        directory = ctx.find_root().params.get("directory") or Path(".")
        try:
            git = ExperienceRepository.open(directory).git
            found = [CompletionItem(ref[len(_PREFIXES[kind]):], help=f"open {kind}")
                     for kind in kinds for ref in git.refs(_PREFIXES[kind])]
        except Exception:
            return []
        return sorted((item for item in found if item.value.startswith(incomplete)),
                      key=lambda item: item.value)

    return complete
