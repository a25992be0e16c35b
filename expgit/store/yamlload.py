"""YAML loading that refuses duplicate keys (YAML forbids them; PyYAML keeps the last).

Experience front matter and cases files both load through :class:`UniqueKeyLoader`;
a subclass names what a key is in its messages and whether repeated ``<<`` merge keys
are allowed.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UniqueKeyLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """The safe loader (libyaml when available), refusing duplicate keys."""

    key_word = "key"
    repeated_merge_keys = False


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
