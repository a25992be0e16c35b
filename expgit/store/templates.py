"""jinja2 templates: the packaged ones, overridable per repository.

A file ``.expgit/templates/<name>`` committed on the repository's ``main`` branch replaces
the packaged template of the same name. It is read from git, so it works on a bare
server and every clone renders the same text. One render sees the overrides of one
commit of ``main``: the tip when it starts, or the commit the caller names
(``templates_at``), e.g. the snapshot a rollout is trained against, so that the renders
of one piece of work agree and ``main`` is not read again for each.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import jinja2

from expgit.resources import data_dir
from expgit.store.repository import ExperienceRepository

OVERRIDE_DIR = ".expgit/templates"
_CACHED_ENVIRONMENTS = 16


_environments: OrderedDict[str | None, jinja2.Environment] = OrderedDict()
_environments_lock = threading.Lock()


def _override_tree(repo: ExperienceRepository, at: str | None = None) -> str | None:
    """The tree of the override folder at commit ``at`` (default: the tip of ``main``),
    None if there is none."""
    git = repo.git
    tip = at if at is not None else git.ref(repo.main_ref)
    entry = git.path_entry(git.read_commit(tip).tree, OVERRIDE_DIR) if tip else None
    return entry.sha if entry is not None and entry.is_tree else None


def _override_files(repo: ExperienceRepository, tree: str, prefix: str = ""
                    ) -> dict[str, bytes]:
    """``{template name: content}`` of every file below the override tree ``tree``."""
    files: dict[str, bytes] = {}
    for entry in repo.git.read_tree(tree):
        if entry.is_tree:
            files |= _override_files(repo, entry.sha, f"{prefix}{entry.name}/")
        elif entry.mode != "160000":
            files[prefix + entry.name] = repo.git.read_blob(entry.sha)
    return files


def environment(repo: ExperienceRepository | None = None, *,
                templates_at: str | None = None) -> jinja2.Environment:
    """The templates as ``main`` has them now (or at commit ``templates_at``): its
    overrides, else the packaged ones.

    Environments are kept by override tree id (a handful, most recent first), so each
    template is compiled once per version of the overrides rather than on every render;
    jinja checks the packaged files for changes (their modification time)."""
    tree = _override_tree(repo, templates_at) if repo is not None else None
    with _environments_lock:
        env = _environments.get(tree)
        if env is not None:
            _environments.move_to_end(tree)
            return env
    loaders: list[jinja2.BaseLoader] = [jinja2.FileSystemLoader(str(data_dir("templates")))]
    if repo is not None and tree is not None:  # a tree never changes: read once
        overrides = _override_files(repo, tree)
        loaders.insert(0, jinja2.FunctionLoader(
            lambda name: (overrides[name].decode("utf-8"), None, lambda: True)
            if name in overrides else None))
    env = jinja2.Environment(loader=jinja2.ChoiceLoader(loaders),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True,
                             # HTML pages (``*.html.j2``) escape what they show
                             autoescape=jinja2.select_autoescape(
                                 enabled_extensions=("html.j2",), default=False))
    env.filters["cell"] = lambda text: " ".join(str(text).split()).replace("|", "\\|")
    with _environments_lock:
        env = _environments.setdefault(tree, env)
        while len(_environments) > _CACHED_ENVIRONMENTS:
            _environments.popitem(last=False)
    return env


def render(name: str, repo: ExperienceRepository | None = None, *,
           templates_at: str | None = None, **context: Any) -> str:
    return environment(repo, templates_at=templates_at).get_template(name).render(**context)


def render_prompt(name: str, repo: ExperienceRepository | None = None, *,
                  templates_at: str | None = None, **context: Any) -> tuple[str, str]:
    """(system, user) messages from ``prompts/<name>.md.j2``, which defines the blocks
    ``system`` and ``user``; a repository may override the file like any template."""
    template = environment(repo, templates_at=templates_at).get_template(
        f"prompts/{name}.md.j2")
    ctx = template.new_context(dict(context))
    blocks = {key: "".join(render(ctx)).strip() for key, render in template.blocks.items()}
    if "system" not in blocks or "user" not in blocks:
        raise KeyError(f"prompt template {name} must define blocks 'system' and 'user'")
    return blocks["system"], blocks["user"]
