"""jinja2 templates: the packaged ones, overridable per repository.

A file ``.expgit/templates/<name>`` committed on the repository's ``main`` branch replaces
the packaged template of the same name. It is read from git, so it works on a bare
server and every clone renders the same text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jinja2

from expgit.repository import ExperienceRepository
from expgit.resources import data_dir

OVERRIDE_DIR = ".expgit/templates"


class _RepoLoader(jinja2.BaseLoader):
    def __init__(self, repo: ExperienceRepository | None) -> None:
        self.repo = repo

    def get_source(self, environment: jinja2.Environment, template: str
                   ) -> tuple[str, str | None, Callable[[], bool] | None]:
        git = self.repo.git if self.repo else None
        tip = git.ref(self.repo.main_ref) if git and self.repo else None
        entry = git.path_entry(git.read_commit(tip).tree, f"{OVERRIDE_DIR}/{template}") \
            if git and tip else None
        if git is None or entry is None:
            raise jinja2.TemplateNotFound(template)
        return git.read_blob(entry.sha).decode("utf-8"), None, lambda: False


def environment(repo: ExperienceRepository | None = None) -> jinja2.Environment:
    loader = jinja2.ChoiceLoader([
        _RepoLoader(repo), jinja2.FileSystemLoader(str(data_dir("templates")))])
    env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True,
                             lstrip_blocks=True, autoescape=False)
    env.filters["cell"] = lambda text: " ".join(str(text).split()).replace("|", "\\|")
    return env


def render(name: str, repo: ExperienceRepository | None = None, **context: Any) -> str:
    return environment(repo).get_template(name).render(**context)


def render_prompt(name: str, repo: ExperienceRepository | None = None, **context: Any
                  ) -> tuple[str, str]:
    """(system, user) messages from ``prompts/<name>.md.j2``, which defines the blocks
    ``system`` and ``user``; a repository may override the file like any template."""
    template = environment(repo).get_template(f"prompts/{name}.md.j2")
    ctx = template.new_context(dict(context))
    blocks = {key: "".join(render(ctx)).strip() for key, render in template.blocks.items()}
    if "system" not in blocks or "user" not in blocks:
        raise KeyError(f"prompt template {name} must define blocks 'system' and 'user'")
    return blocks["system"], blocks["user"]
