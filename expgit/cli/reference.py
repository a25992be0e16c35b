"""The reference pages of the docs site, made from the code so they cannot go stale: the
command line (from click's command tree), ``expgit.toml`` (from the settings models) and
the exit codes (from the error kinds of :mod:`expgit.errors`).

``docs/hooks.py`` adds :data:`PAGES` to the site at build time (``mkdocs build``), so no
generated page is kept in git. Every text from the code is escaped for markdown here:
``<name>`` stays text, not an HTML tag, and ``|`` does not split a table cell.
"""

from __future__ import annotations

import html
import inspect
import json
import re
import types
from collections.abc import Callable, Iterator
from dataclasses import astuple
from typing import Any, Literal, Union, get_args, get_origin

import click
from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from expgit import errors
from expgit.cli import Terminated, cli
from expgit.store.format.settings import SETTINGS_FILE, Settings

_CODE_SPAN = re.compile(r"(`[^`\n]+`)")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]#!|])")


def inline(text: str) -> str:
    """``text`` as one line of markdown that shows exactly that text, also in a table cell:
    HTML and markdown syntax escaped, ```code``` spans kept as code (a table does not
    split a cell on a ``|`` inside one)."""
    return "".join(
        part if _CODE_SPAN.fullmatch(part)
        else _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(part, quote=False))
        for part in _CODE_SPAN.split(" ".join(text.split())))


def docstring(text: str) -> str:
    """A docstring's reStructuredText markup as markdown: ````x```` and ``:mod:`x``` as
    ```x```."""
    return re.sub(r":\w+:`([^`]+)`", r"`\1`", inspect.cleandoc(text).replace("``", "`"))


def prose(text: str) -> str:
    """A click help text as markdown: its paragraphs, and each ``\\b`` (unwrapped) block,
    an example say, as a code block."""
    blocks = []
    for paragraph in re.split(r"\n\s*\n", inspect.cleandoc(text.split("\f")[0])):
        if paragraph.startswith("\b"):
            title, _, code = paragraph[1:].strip("\n").partition("\n")
            if not title.endswith(":") or not code.startswith(" "):  # no "Example:" line
                title, code = "", paragraph[1:].strip("\n")
            blocks += [inline(title)] if title else []
            blocks.append(f"```text\n{inspect.cleandoc(code)}\n```")
        elif paragraph.strip():
            blocks.append(inline(paragraph))
    return "\n\n".join(blocks)


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def commands(group: click.Command, ctx: click.Context) -> Iterator[click.Context]:
    """The context of ``group`` and of every command below it, depth first, by name."""
    yield ctx
    if isinstance(group, click.Group):
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if command is not None and not command.hidden:
                yield from commands(command, click.Context(
                    command, parent=ctx, info_name=name, show_default=True))


def _param_type(param: click.Parameter, ctx: click.Context) -> str:
    if isinstance(param, click.Option) and param.is_flag:
        return "flag"
    if isinstance(param.type, click.Choice):
        return "one of " + ", ".join(f"`{choice}`" for choice in param.type.choices)
    return inline(param.type.name)


def _param_row(param: click.Parameter, ctx: click.Context) -> str:
    if isinstance(param, click.Option):
        record = param.get_help_record(ctx)
        shown = record[0] if record else param.opts[0]
        extra = param.get_help_extra(ctx)
        default = extra.get("default", "").removeprefix("(").removesuffix(")")
        kind = _param_type(param, ctx) + (f" ({extra['range']})" if "range" in extra else "")
        envvar = param.envvar if isinstance(param.envvar, str) else ", ".join(
            param.envvar or ())
        help_text = ("required. " if param.required else "") + (param.help or "")
    else:
        shown = param.make_metavar(ctx)
        default = str(param.default) if isinstance(param.default, str | int) else ""
        kind, envvar = _param_type(param, ctx), ""
        help_text = "argument" + (", required" if param.required else "")
    return _row(inline(f"`{shown}`"), kind, inline(default), f"`{envvar}`" if envvar else "",
                inline(help_text))


def cli_reference(root: click.Command, prog_name: str = "expgit") -> str:
    """Every command and subcommand of ``root`` (run as ``prog_name``): usage, help
    (examples included), and its options with their types, defaults and environment
    variables."""
    out = ["# Command line", "",
           "Made from the command line's own definitions (`expgit --help`, `expgit "
           "COMMAND --help`) each time the site is built.", ""]
    for ctx in commands(root, click.Context(root, info_name=prog_name, show_default=True)):
        command = ctx.command
        path = ctx.command_path
        out += [f"## `{path}` {{ #{path.replace(' ', '-')} }}", "",
                "```text", f"{path} {' '.join(command.collect_usage_pieces(ctx))}", "```",
                "", prose(command.help or command.short_help or ""), ""]
        params = [p for p in command.get_params(ctx)
                  if not (isinstance(p, click.Option) and p.hidden)]
        if params:
            out += [_row("Option", "Type", "Default", "Environment", "Description"),
                    _row(*["---"] * 5), *(_param_row(p, ctx) for p in params), ""]
        if isinstance(command, click.Group):
            subcommands = [f"[`{path} {name}`](#{path.replace(' ', '-')}-{name})"
                           for name in command.list_commands(ctx)]
            out += ["Commands: " + ", ".join(subcommands) + ".", ""]
        if command.epilog:
            out += [prose(command.epilog), ""]
    return "\n".join(out)


def _constraints(info: FieldInfo) -> Iterator[str]:
    """The bounds of a field (``Field(gt=0)``, ``min_length``, ...), as ``> 0``."""
    for item in info.metadata:
        if isinstance(item, Gt | Ge | Lt | Le):
            sign = {Gt: ">", Ge: "≥", Lt: "<", Le: "≤"}[type(item)]
            yield f"{sign} {astuple(item)[0]}"
        elif isinstance(item, MinLen | MaxLen):
            sign = "≥" if isinstance(item, MinLen) else "≤"
            yield f"length {sign} {astuple(item)[0]}"


def _type_name(annotation: Any, anchor: str) -> str:
    """A field's type in TOML's words; a table links to its section (``anchor``)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " or ".join(f"`{json.dumps(a)}`" for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a, anchor) for a in args)
    if origin in (list, tuple):
        return f"list of {_type_name(args[0], anchor)}s"
    if origin is dict:
        value = _type_name(args[1], anchor + "-name")
        return f"table of {value.replace('[table]', '[tables]')}" + (
            "" if value.startswith("[") else "s")
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[table](#{anchor})"
    names = {str: "string", int: "integer", float: "number", bool: "boolean",
             type(None): "unset"}
    return names.get(annotation, inline(str(getattr(annotation, "__name__", annotation))))


def _toml(value: Any) -> str:
    if value is None or isinstance(value, BaseModel):
        return "unset" if value is None else ""
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`".replace("|", "\\|")


def _models(model: type[BaseModel], table: str) -> Iterator[tuple[str, type[BaseModel]]]:
    """``(table name, model)`` for ``model`` and each table below it."""
    yield table, model
    for key, info in model.model_fields.items():
        name = f"{table}.{key}" if table else key
        keyed = get_origin(info.annotation) is dict  # [table."NAME"] tables
        for arg in get_args(info.annotation)[1:] if keyed else (
                info.annotation, *get_args(info.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                yield from _models(arg, f'{name}."NAME"' if keyed else name)


def _table_summary(info: FieldInfo) -> str:
    """A table's description: its model's first sentence, without the ``[name]:``."""
    model = next((a for a in (info.annotation, *get_args(info.annotation))
                  if isinstance(a, type) and issubclass(a, BaseModel)), None)
    first = docstring(model.__doc__ or "").split(". ")[0] if model else ""
    first = re.sub(r"^`\[[^]]*\]`: ", "", first).rstrip(".")
    return first[:1].upper() + first[1:] + "." if first else ""


def _anchor(table: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", table.lower()).strip("-") or "top-level"


def configuration_reference(root: type[BaseModel] = Settings) -> str:
    """Every key of ``expgit.toml``, table by table: type, default and description."""
    out = ["# Configuration", "",
           f"`{SETTINGS_FILE}` at the root of the experience repository, read from the "
           "tip of the main branch (never from a working tree). Every key is optional. "
           "Made from the settings models each time the site is built.", ""]
    for table, model in _models(root, ""):
        out += [f"## `[{table}]` {{ #{_anchor(table)} }}" if table else
                "## Top-level keys { #top-level }", ""]
        if model.__doc__ and table:
            out += [prose(docstring(model.__doc__)), ""]
        out += [_row("Key", "Type", "Default", "Description"), _row(*["---"] * 4)]
        for key, info in model.model_fields.items():
            kind = _type_name(info.annotation, _anchor(f"{table}.{key}"))
            kind += "".join(f", {inline(c)}" for c in _constraints(info))
            default = info.get_default(call_default_factory=True, validated_data={})
            out.append(_row(f"`{key}`", kind, _toml(default),
                            inline(info.description or _table_summary(info))))
        out.append("")
    return "\n".join(out)


def error_kinds() -> list[type[errors.ExpgitError]]:
    """Every error kind of :mod:`expgit.errors`, in the order it defines them."""
    return [kind for _, kind in sorted(
        ((inspect.getsourcelines(kind)[1], kind) for kind in vars(errors).values()
         if isinstance(kind, type) and issubclass(kind, errors.ExpgitError)),
        key=lambda pair: pair[0])]


def exit_codes_reference() -> str:
    """Every exit code and what it means, then every error kind with its code."""
    out = ["# Exit codes", "",
           "Made from the error kinds (`expgit/errors.py`) each time the site is built. "
           "A failed command prints `expgit: error: MESSAGE (HINT)` on stderr; under "
           "`--json`, also `{\"error\": ..., \"hint\": ..., \"exit_code\": ...}` on stdout.",
           "", _row("Code", "Meaning"), _row("---", "---")]
    out += [_row(f"`{code}`", inline(meaning)) for code, meaning in errors.exit_codes().items()]
    out += ["", "## Error kinds", "",
            "Library callers catch `ExpgitError` or one of its kinds.", "",
            _row("Error kind", "Is a", "Exit code", "Meaning"), _row(*["---"] * 4)]
    for kind in error_kinds():
        parent = kind.__mro__[1].__name__ if kind is not errors.ExpgitError else ""
        out.append(_row(f"`{kind.__name__}`", f"`{parent}`" if parent else "",
                        f"`{kind.exit_code}`", inline(docstring(kind.__doc__ or ""))))
    out += ["", "## Signals", "", prose(docstring(Terminated.__doc__ or ""))]
    return "\n".join([*out, ""])


# docs path -> the page's markdown
PAGES: dict[str, Callable[[], str]] = {
    "reference/cli.md": lambda: cli_reference(cli),
    "reference/configuration.md": configuration_reference,
    "reference/exit-codes.md": exit_codes_reference,
}
