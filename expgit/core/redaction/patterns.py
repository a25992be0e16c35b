"""What counts as a secret-like name, and which assigned values are not secrets
(placeholders, variables, type names): the judgement :mod:`expgit.core.redaction.text` uses
for ``name = value`` assignments and tool-input keys."""

from __future__ import annotations

import re

# A secret-like name (no capturing groups): the name may have a prefix (DB_, x-, aws_).
SECRET_KEY = (r"[A-Za-z0-9_-]*?(?:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key"
              r"|client[_-]?secret|token|secret|password|passwd|passphrase)")
_PASSWORD_KEY = re.compile(r"(?i).*(?:password|passwd|passphrase)")

_PLACEHOLDER = re.compile(
    r"(?i)^(?:[$%<{]|\*{3,}|x{3,}|\.{3}|your[_-]|example|redacted)|\.{3}$")
_NOT_VALUES = {
    "none", "null", "nil", "true", "false", "undefined", "required", "optional", "str",
    "string", "bytes", "int", "integer", "bool", "boolean", "secretstr", "any", "object",
    "self", "cls", "env", "environ", "getenv", "getpass", "input",
}
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")  # the whole value: fullmatch
MIN_CHARS = 4


def is_placeholder(value: str) -> bool:
    """A value that only stands for a secret: ``$VAR``, ``<token>``, ``{{ x }}``,
    ``YOUR_KEY``, ``xxx``, ``***``, ``...``, ``None``/``null``/``true``, type names."""
    stripped = value.strip()
    return (not stripped or _PLACEHOLDER.search(stripped) is not None
            or stripped.lower() in _NOT_VALUES)


def secret_value_ok(key: str, value: str, quoted: bool) -> bool:
    """Whether ``value``, assigned to the secret-like ``key``, should be redacted:
    at least four characters, not a placeholder, not the key's own name (``api_key=
    api_key``); unquoted, also not dotted attribute access (``settings.SECRET_KEY``)
    and, unless the key is a password, not a plain number (``token: 42``)."""
    if len(value) < MIN_CHARS or is_placeholder(value):
        return False
    if value.lower().replace("-", "_") == key.lower().replace("-", "_"):
        return False
    if quoted:
        return True
    if _DOTTED.fullmatch(value):
        return False
    return not (value.isdigit() and not _PASSWORD_KEY.match(key))
