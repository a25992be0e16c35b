"""jinja2 templates: the packaged ones, overridable per repository.

A file ``.expgit/templates/<name>`` committed on the repository's ``main`` branch replaces
the packaged template of the same name. It is read from git, so it works on a bare
server and every clone renders the same text. One render sees the overrides of one
commit of ``main``: the tip when it starts, or the commit the caller names
(``templates_at``), e.g. the snapshot a rollout is trained against, so that the renders
of one piece of work agree and ``main`` is not read again for each.

Every template renders in jinja2's sandbox (:class:`jinja2.sandbox.ImmutableSandboxedEnvironment`,
as Ansible, Home Assistant and Airflow's user templates do): a template only formats
text. Touching an unsafe attribute (``cycler.__init__.__globals__``) raises at once,
and any failure to compile or render is :class:`~expgit.errors.InvalidInputError` (exit
5) naming the template, its override path when a repository supplies it.
:func:`check_overrides` renders every override of a commit once with a sample context,
for ``validate`` and the hooks.
"""

from __future__ import annotations

from typing import Any, NoReturn

import jinja2
import jinja2.exceptions
import jinja2.sandbox

from expgit.errors import InvalidInputError
from expgit.git.idcache import IdCache
from expgit.git.objects import GITLINK_MODE
from expgit.resources import data_dir
from expgit.store.repository import ExperienceRepository

OVERRIDE_DIR = ".expgit/templates"
_CACHED_ENVIRONMENTS = 16


class _Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """jinja2's immutable sandbox, where an unsafe attribute fails the render at once
    (jinja's own returns an undefined value, which a lenient context would print as
    nothing). ``override_names``: the templates a repository's overrides supply."""

    override_names: frozenset[str] = frozenset()

    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
        raise jinja2.exceptions.SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")


_environments: IdCache[_Sandbox] = IdCache(_CACHED_ENVIRONMENTS)  # by override tree


def _override_tree(repo: ExperienceRepository, at: str | None = None,
                   tree: str | None = None) -> str | None:
    """The tree of the override folder at commit ``at`` (default: the tip of ``main``),
    or in the root tree ``tree`` when given; None if there is none."""
    git = repo.git
    if tree is None:
        tip = at if at is not None else git.ref(repo.main_ref)
        tree = git.read_commit(tip).tree if tip else None
    entry = git.path_entry(tree, OVERRIDE_DIR) if tree else None
    return entry.sha if entry is not None and entry.is_tree else None


def _override_files(repo: ExperienceRepository, tree: str, prefix: str = ""
                    ) -> dict[str, bytes]:
    """``{template name: content}`` of every file below the override tree ``tree``."""
    files: dict[str, bytes] = {}
    for entry in repo.git.read_tree(tree):
        if entry.is_tree:
            files |= _override_files(repo, entry.sha, f"{prefix}{entry.name}/")
        elif entry.mode != GITLINK_MODE:
            files[prefix + entry.name] = repo.git.read_blob(entry.sha)
    return files


class _SampleValue(jinja2.ChainableUndefined):
    """Any variable of a sample render (:func:`check_overrides`): every attribute, item,
    call and operation gives itself, it iterates as empty, prints as nothing, compares
    as false and counts as 0, so a template runs through without a real context (every
    packaged one does). The operations are set below: jinja's Undefined types them as
    failing."""

    __slots__ = ()


def _sample_operations() -> None:
    def itself(value: _SampleValue, *args: Any, **kwargs: Any) -> _SampleValue:
        return value

    def never(value: _SampleValue, other: Any) -> bool:
        return False

    for name in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv",
                 "floordiv", "rfloordiv", "mod", "rmod", "pow", "rpow", "pos", "neg",
                 "call"):
        setattr(_SampleValue, f"__{name}__", itself)
    for name in ("lt", "le", "gt", "ge"):
        setattr(_SampleValue, f"__{name}__", never)
    for name, zero in (("int", 0), ("float", 0.0), ("complex", 0j)):
        setattr(_SampleValue, f"__{name}__", lambda value, zero=zero: zero)


_sample_operations()


def _sandbox(loader: jinja2.BaseLoader, undefined: type[jinja2.Undefined]) -> _Sandbox:
    env = _Sandbox(loader=loader, undefined=undefined, keep_trailing_newline=True,
                   trim_blocks=True, lstrip_blocks=True,
                   # HTML pages (``*.html.j2``) escape what they show
                   autoescape=jinja2.select_autoescape(
                       enabled_extensions=("html.j2",), default=False))
    env.filters["cell"] = lambda text: " ".join(str(text).split()).replace("|", "\\|")
    return env


def _overridden(repo: ExperienceRepository | None, tree: str | None,
                undefined: type[jinja2.Undefined]) -> _Sandbox:
    """A sandbox whose templates are the files of the override tree ``tree`` (None:
    none), else the packaged ones."""
    overrides = _override_files(repo, tree) if repo is not None and tree is not None else {}
    env = _sandbox(jinja2.ChoiceLoader([
        jinja2.FunctionLoader(lambda name: (overrides[name].decode("utf-8"), None,
                                            lambda: True) if name in overrides else None),
        jinja2.FileSystemLoader(str(data_dir("templates")))]), undefined)
    env.override_names = frozenset(overrides)
    return env


def environment(repo: ExperienceRepository | None = None, *,
                templates_at: str | None = None, templates_tree: str | None = None
                ) -> jinja2.Environment:
    """The templates as ``main`` has them now (or at commit ``templates_at``, or in the
    root tree ``templates_tree``): its overrides, else the packaged ones.

    Environments are kept by override tree id (a handful, most recent first), so each
    template is compiled once per version of the overrides rather than on every render;
    jinja checks the packaged files for changes (their modification time)."""
    tree = _override_tree(repo, templates_at, templates_tree) if repo is not None else None
    env = _environments.get(tree, touch=True)
    if env is None:  # a tree never changes: read once
        env = _overridden(repo, tree, jinja2.StrictUndefined)
        _environments.put(tree, env)
    return env


def check_overrides(repo: ExperienceRepository, root_tree: str) -> list[str]:
    """Problems of the template overrides in the commit tree ``root_tree`` ([] when each
    renders): every file under ``.expgit/templates/`` is compiled and rendered once in
    the sandbox with a sample context (:class:`_SampleValue`); one that does not
    compile, is not UTF-8, fails to render, touches an unsafe attribute, or (a prompt)
    lacks a block is named."""
    tree = _override_tree(repo, tree=root_tree)
    if tree is None:
        return []
    env = _overridden(repo, tree, _SampleValue)
    problems: list[str] = []
    for name in sorted(env.override_names):
        try:
            template = env.get_template(name)
            if name.startswith("prompts/"):
                _prompt_blocks(template, {})
            else:
                template.render()
        except Exception as exc:  # any failure of a repository's own template
            problems.append(_refusal(env, name, exc).message)
    return problems


def render(name: str, repo: ExperienceRepository | None = None, *,
           templates_at: str | None = None, templates_tree: str | None = None,
           **context: Any) -> str:
    env = environment(repo, templates_at=templates_at, templates_tree=templates_tree)
    try:
        return env.get_template(name).render(**context)
    except (jinja2.TemplateError, UnicodeDecodeError) as exc:
        _refuse(env, name, exc)


def render_prompt(name: str, repo: ExperienceRepository | None = None, *,
                  templates_at: str | None = None, **context: Any) -> tuple[str, str]:
    """(system, user) messages from ``prompts/<name>.md.j2``, which defines the blocks
    ``system`` and ``user``; a repository may override the file like any template.
    Every prompt's context has ``layout``: the repository's, ``"flat"`` or ``"skills"``
    (the prompts that ask for edits describe the Agent Skills format in the latter)."""
    env = environment(repo, templates_at=templates_at)
    path = f"prompts/{name}.md.j2"
    context.setdefault("layout", repo.settings.layout if repo is not None else "flat")
    try:
        blocks = _prompt_blocks(env.get_template(path), context)
    except (jinja2.TemplateError, UnicodeDecodeError) as exc:
        _refuse(env, path, exc)
    return blocks["system"], blocks["user"]


def _prompt_blocks(template: jinja2.Template, context: dict[str, Any]) -> dict[str, str]:
    ctx = template.new_context(dict(context))
    blocks = {key: "".join(render(ctx)).strip() for key, render in template.blocks.items()}
    if "system" not in blocks or "user" not in blocks:
        raise jinja2.TemplateError("a prompt template must define the blocks 'system' and "
                                   "'user'")
    return blocks


def _where(env: jinja2.Environment, name: str) -> str:
    overrides = env.override_names if isinstance(env, _Sandbox) else frozenset()
    return f"{OVERRIDE_DIR}/{name}" if name in overrides else f"packaged template {name}"


def _refuse(env: jinja2.Environment, name: str, exc: Exception) -> NoReturn:
    raise _refusal(env, name, exc) from exc


def _refusal(env: jinja2.Environment, name: str, exc: Exception) -> InvalidInputError:
    """The one error of a template that cannot render: InvalidInputError naming it."""
    failing = getattr(exc, "name", None)
    where = _where(env, failing if isinstance(failing, str) and failing else name)
    kind = "unsafe" if isinstance(exc, jinja2.exceptions.SecurityError) else "cannot render"
    detail = " ".join(str(exc).split())[:300]
    return InvalidInputError(
        f"template {where}: {kind}: {detail}",
        hint="templates only format text (jinja2 sandbox); fix or remove the override "
             f"under {OVERRIDE_DIR}/ on main")
