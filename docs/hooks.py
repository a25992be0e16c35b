"""mkdocs hook: adds the reference pages, made from the code (expgit/cli/reference.py),
to the site each time it is built; none of them is kept in git."""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from expgit.cli.reference import PAGES


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path, render in PAGES.items():
        files.append(File.generated(config, path, content=render()))
    return files
