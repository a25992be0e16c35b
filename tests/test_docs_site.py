"""The docs site (mkdocs.yml): ``mkdocs build --strict`` passes offline, and its reference
pages, made from the code (expgit/cli/reference.py), name every command, every
``expgit.toml`` key and every error kind, and render to exactly the code's text."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import get_args, get_origin

import click
import markdown
import pytest
import yaml
from conftest import ROOT
from pydantic import BaseModel

from expgit import errors
from expgit.cli import cli
from expgit.cli.reference import (
    PAGES,
    cli_reference,
    configuration_reference,
    error_kinds,
    exit_codes_reference,
    inline,
)
from expgit.store.format.settings import Settings


class _Text(HTMLParser):
    """The visible text of an HTML page, whitespace folded."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def visible_text(page: str) -> str:
    parser = _Text()
    parser.feed(page)
    return " ".join("".join(parser.parts).split())


def rendered(text: str) -> str:
    """How the site renders this markdown, as visible text."""
    return visible_text(markdown.markdown(text, extensions=["tables", "attr_list"]))


def shown(text: str) -> str:
    """The text a page should show for a help text or description: code spans' backticks
    gone, whitespace folded."""
    return " ".join(text.replace("``", "`").replace("`", "").split())


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI builds it, with every proxy pointing at a closed port: a
    build that tried to download anything (fonts, a social card) would fail."""
    out = tmp_path_factory.mktemp("site")
    dead = "http://127.0.0.1:9"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HTTP_PROXY": dead,
           "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead, "NO_PROXY": ""}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert not re.search(r"^(WARNING|ERROR)", result.stderr, re.MULTILINE), result.stderr
    return out


@pytest.mark.slow
def test_site_builds_strict_offline_with_every_page(site: Path) -> None:
    pages = {p.relative_to(ROOT / "docs").with_suffix("").as_posix()
             for p in (ROOT / "docs").glob("*.md")}
    pages |= {path.removesuffix(".md") for path in PAGES}
    for page in pages:
        built = site / ("" if page == "index" else page) / "index.html"
        assert built.is_file(), page
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "fonts.googleapis.com" not in home  # nothing to fetch when the page is read
    assert not (site / "hooks.py").exists()  # the hook is code, not a page
    # a page left out of the nav, a broken link or anchor: each a warning, so --strict fails
    validation = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))[
        "validation"]
    assert validation["omitted_files"] == validation["not_found"] == "warn"
    assert validation["anchors"] == "warn"


def test_the_built_reference_pages_show_the_codes_text(site: Path) -> None:
    cli_page = visible_text((site / "reference/cli/index.html").read_text(encoding="utf-8"))
    for ctx in every_command():
        assert ctx.command_path in cli_page
        for param in ctx.command.params:
            if isinstance(param, click.Option) and param.help:
                assert shown(param.help) in cli_page, (ctx.command_path, param.name)
    # a help text with <name> shows it as text, not as an unknown HTML tag
    assert "DIR/.agents/skills/<name>/" in cli_page
    config_page = visible_text(
        (site / "reference/configuration/index.html").read_text(encoding="utf-8"))
    for _, model in settings_tables():
        for info in model.model_fields.values():
            if info.description:
                assert shown(info.description) in config_page
    codes_page = visible_text(
        (site / "reference/exit-codes/index.html").read_text(encoding="utf-8"))
    for kind in error_kinds():
        assert f"{kind.__name__} " in codes_page


def every_command(root: click.Command = cli) -> Iterator[click.Context]:
    """click's command tree, walked here on its own (not with the generator's walk)."""
    pending = [click.Context(root, info_name="expgit")]
    while pending:
        ctx = pending.pop()
        yield ctx
        if isinstance(ctx.command, click.Group):
            for name in ctx.command.list_commands(ctx):
                sub = ctx.command.get_command(ctx, name)
                assert sub is not None
                pending.append(click.Context(sub, parent=ctx, info_name=name))


def undocumented_commands(page: str, root: click.Command = cli) -> list[str]:
    return [ctx.command_path for ctx in every_command(root)
            if f"## `{ctx.command_path}`" not in page]


def test_cli_reference_names_every_command_and_option() -> None:
    page = cli_reference(cli)
    assert undocumented_commands(page) == []
    assert len(list(every_command())) > 30  # the walk reaches the subcommands
    assert "## `expgit sessions ingest`" in page
    for ctx in every_command():
        section = page.split(f"## `{ctx.command_path}` ")[1].split("\n## ")[0]
        for param in ctx.command.get_params(ctx):
            names = param.opts if isinstance(param, click.Option) else [param.human_readable_name]
            for name in names:
                assert name in section, (ctx.command_path, name)
    # the check fails on a page that leaves a command out
    planted = page.replace("## `expgit sessions ingest`", "## `expgit sessions ingested`")
    assert undocumented_commands(planted) == ["expgit sessions ingest"]


def test_cli_reference_of_a_planted_tree_renders_each_cell() -> None:
    @click.group()
    def tool() -> None:
        """A tool.

        \b
        Example:
          tool inner act --mode a
        """

    @tool.group()
    def inner() -> None:
        """Inner <group>."""

    @inner.command()
    @click.argument("target")
    @click.option("--mode", type=click.Choice(["a", "b"]), default="a", show_default=True,
                  envvar="TOOL_MODE", help="Pick a|b for <target>, see `x|y` *here*.")
    @click.option("--count", type=click.IntRange(min=1), default=3, help="How many.")
    def act(target: str, mode: str, count: int) -> None:
        """Act on TARGET."""

    page = cli_reference(tool, "tool")
    assert [h for h in page.splitlines() if h.startswith("## ")] == [
        "## `tool` { #tool }", "## `tool inner` { #tool-inner }",
        "## `tool inner act` { #tool-inner-act }"]
    html_page = markdown.markdown(page, extensions=["tables", "attr_list", "fenced_code"])
    assert '<pre><code class="language-text">tool inner act --mode a' in html_page
    row = re.search(r"<tr>\s*<td><code>--mode \[a\|b\]</code></td>(.*?)</tr>", html_page,
                    re.DOTALL)
    assert row is not None, html_page
    cells = re.findall(r"<td>(.*?)</td>", row.group(1), re.DOTALL)
    assert cells == ["one of <code>a</code>, <code>b</code>", "a", "<code>TOOL_MODE</code>",
                     "Pick a|b for &lt;target&gt;, see <code>x|y</code> *here*."]
    count = re.search(r"<td><code>--count INTEGER RANGE</code></td>(.*?)</tr>", html_page,
                      re.DOTALL)
    assert count is not None
    assert re.findall(r"<td>(.*?)</td>", count.group(1))[:2] == ["integer range (x&gt;=1)",
                                                                 "3"]
    assert "Inner &lt;group&gt;." in html_page


@pytest.mark.parametrize("text", [
    "plain", "a <b> tag & an | pipe", "`code | with <pipe>` and *stars* _under_ [link]",
    "#hash at the start", "a lone ` backtick", "back\\slash \\` and !bang",
])
def test_inline_shows_exactly_its_text_in_a_table_cell(text: str) -> None:
    table = f"| head | other |\n| --- | --- |\n| {inline(text)} | end |\n"
    page = markdown.markdown(table, extensions=["tables"])
    cells = re.findall(r"<td>(.*?)</td>", page, re.DOTALL)
    assert len(cells) == 2 and cells[1] == "end", page
    code_free = text if text.count("`") % 2 else text.replace("`", "")
    assert html.unescape(re.sub(r"</?code>", "", cells[0])) == code_free


def settings_tables(model: type[BaseModel] = Settings, table: str = ""
                    ) -> Iterator[tuple[str, type[BaseModel]]]:
    """``(table, model)`` of expgit.toml: the settings models, walked here on their own."""
    yield table, model
    for key, info in model.model_fields.items():
        name = f"{table}.{key}" if table else key
        keyed = get_origin(info.annotation) is dict
        for arg in get_args(info.annotation) or (info.annotation,):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                yield from settings_tables(arg, f'{name}."NAME"' if keyed else name)


def undocumented_keys(page: str) -> list[str]:
    sections = dict(re.findall(r"^## (?:`\[(.*?)\]`|Top-level keys).*?\n(.*?)(?=^## |\Z)",
                               page, re.MULTILINE | re.DOTALL))
    return [f"{table}.{key}".strip(".") for table, model in settings_tables()
            for key in model.model_fields
            if f"| `{key}` |" not in sections.get(table, "")]


def test_configuration_reference_names_every_key_with_a_description() -> None:
    page = configuration_reference()
    assert undocumented_keys(page) == []
    tables = [table for table, _ in settings_tables()]
    assert {"llm", 'llm.prices."NAME"', "agent.mcp", "skills"} <= set(tables)
    # every key that is not a table of its own says what it is, in the model
    missing = [f"{table}.{key}" for table, model in settings_tables()
               for key, info in model.model_fields.items()
               if not info.description and not any(
                   isinstance(a, type) and issubclass(a, BaseModel)
                   for a in (info.annotation, *get_args(info.annotation)))]
    assert missing == []
    assert "| `max_cost` | number or unset, &gt; 0 | unset |" in page
    assert "| `layout` | `\"flat\"` or `\"skills\"` | `\"flat\"` |" in page
    assert '| `always_on_files` | list of strings | `["AGENTS.md"]` |' in page
    # the check fails on a page that leaves a key out
    planted = page.replace("| `state_key_argument` |", "| `state_key` |")
    assert undocumented_keys(planted) == ["agent.mcp.state_key_argument"]


def undocumented_errors(page: str) -> list[str]:
    kinds = [k for k in vars(errors).values()
             if isinstance(k, type) and issubclass(k, errors.ExpgitError)]
    return sorted(k.__name__ for k in kinds
                  if not re.search(rf"^\| `{k.__name__}` \| .* \| `{k.exit_code}` \|", page,
                                   re.MULTILINE))


def test_exit_codes_reference_names_every_code_and_error_kind() -> None:
    page = exit_codes_reference()
    assert undocumented_errors(page) == []
    for code, meaning in errors.exit_codes().items():
        assert rendered(f"`{code}` {inline(meaning)}") in rendered(page)
    assert "| `ToolServerError` | `RunErrorsError` | `7` |" in page
    assert "(143)" in page  # SIGTERM's, from the CLI's handler
    planted = page.replace("| `GateError` |", "| `Gate` |")
    assert undocumented_errors(planted) == ["GateError"]
