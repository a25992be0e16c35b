"""YAML loading that refuses duplicate keys (YAML forbids them; PyYAML keeps the last)
and alias bombs.

Experience front matter and cases files both load through :class:`UniqueKeyLoader`, the
front matter of stored trajectories through :class:`BoundedSafeLoader`;
a subclass names what a key is in its messages and whether repeated ``<<`` merge keys
are allowed.

An alias bomb ("billion laughs": nine aliases of nine aliases of ...) is a kilobyte that
stands for billions of nodes: PyYAML shares the aliased objects, but whatever walks the
result (validation, JSON, a prompt) expands them. Like go-yaml (Kubernetes) and
SnakeYAML, the loader bounds what aliases may add: the document, its aliases expanded,
may have at most ``max(ALIAS_EXPANSION_FLOOR, ALIAS_EXPANSION_RATIO x its written
nodes)`` nodes more than it is written with, else it is refused as invalid YAML. An
ordinary document (``<<: *defaults`` in every case) stays far below the bound.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class BoundedSafeLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """The safe loader (libyaml when available), refusing an alias bomb: for YAML that
    expgit wrote itself but reads back from a branch others can push to."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        check_alias_expansion(node)
        return self.construct_document(node)


class UniqueKeyLoader(BoundedSafeLoader):
    """:class:`BoundedSafeLoader`, also refusing duplicate keys."""

    key_word = "key"
    repeated_merge_keys = False


ALIAS_EXPANSION_FLOOR = 10_000  # nodes that aliases may add to any document
ALIAS_EXPANSION_RATIO = 10  # ... or this many times the nodes it is written with


def check_alias_expansion(root: yaml.Node) -> None:
    """Raise a YAML error if aliases expand the document under ``root`` past the bound
    (see the module docstring). Iterative, each node sized once: linear in the written
    document. A recursive alias (a node inside itself) counts once."""
    sizes: dict[int, int] = {}  # id(node) -> its size with aliases expanded
    written = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes and not children_done:
            continue  # an alias of a node already sized (or being sized: a recursion)
        children = _children(node)
        if not children_done:
            written += 1
            sizes[id(node)] = 1  # a recursive alias meets this provisional size
            stack.append((node, True))
            stack.extend((child, False) for child in children)
            continue
        sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
    added = sizes[id(root)] - written
    allowed = max(ALIAS_EXPANSION_FLOOR, ALIAS_EXPANSION_RATIO * written)
    if added > allowed:
        raise yaml.composer.ComposerError(
            None, None, f"aliases expand the document by more than {allowed:,} nodes "
            f"(an alias bomb?); write the repeated parts out", root.start_mark)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _unique_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if loader.repeated_merge_keys and key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, Hashable):
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate {loader.key_word} {key!r}", key_node.start_mark)
            seen.add(key)
    return loader.construct_mapping(node, deep=True)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)
