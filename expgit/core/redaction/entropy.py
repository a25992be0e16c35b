"""Secrets without a label: random-looking tokens, judged by their Shannon entropy as
detect-secrets does, calibrated so that ordinary text is left alone.

detect-secrets' entropy plugins look at quoted strings only, with one limit per charset
(4.5 bits for base64, 3.0 for hex). A model that copies a key into prose copies it bare,
so here every run of the base64 alphabet (``A-Za-z0-9+/_-``, ``=`` padding) of
:data:`MIN_CHARS` characters or more is a candidate, and it counts as a secret when

* its entropy is at least :data:`RATIO` of ``log2(min(length, 64))``, the most a string
  of that length can have: a random 40-character base64 key has about 4.8 bits (1 in 100
  under 4.48), the limit at 40 characters is 4.26; English words, paths and identifiers
  repeat letters and stay under it;
* it mixes upper case, lower case and digits (a random key of 20 characters or more
  almost surely does), and its words of letters, split as identifiers are
  (``snake_case``, ``CamelCase``, at digits), are shorter than :data:`MAX_WORD_CHARS` on
  average: ``OpenAIChatModel4oMini`` has 3.3 letters a word, ``V2HttpV2CabinTokens58``
  3.4, a random key of 40 characters 2.1 (exempt: the shape of an AWS secret access
  key, 40 characters of standard base64 with a ``/`` or ``+``, as gitleaks' AWS rule
  matches it: AWS's own example key ``wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY`` ends
  in a long word, and no identifier has that shape); and it has at most one
  separator (``-_/+``) in 10 characters, plus one: in a random key each is 1 character
  in 32, in ``1-8B-Instruct-Q4_K_M`` (a model file's name) 1 in 5;
* it is not hexadecimal (git object ids, sha256 digests, UUIDs: too common in tool
  outputs to redact, so a hex secret is only found with its label);
* it is not a typed id, a lower-case word and ``_`` or ``-`` before the random part
  (``toolu_015Mqx...``, ``call_9pw1qn...``, ``chatcmpl-9aBc...``, ``cus_...``): the ids
  of tool calls, messages and API objects, which transcripts pair and cite; the keys
  that have such a prefix (``sk-``, ``ghp_``, ``xoxb-``, ``hf_``...) are found by their
  own rules first;
* it is not the payload of a ``data:...;base64,`` URI (a declared image or file);
* it is not base64 of text (a JSON or YAML blob in a tool output), unless that text
  holds a secret (a Kubernetes secret's value): the caller decides on the decoded text.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter

MIN_CHARS = 20
RATIO = 0.8
MAX_WORD_CHARS = 3.0
_MAX_ALPHABET = 64
_SEPARATORS = frozenset("-_/+")

_OUTSIDE = r"[A-Za-z0-9+/=_-]"
CANDIDATE = re.compile(rf"(?<!{_OUTSIDE})[A-Za-z0-9+/_-]{{{MIN_CHARS},}}={{0,2}}(?!{_OUTSIDE})")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")
_HEX = re.compile(r"[0-9a-fA-F-]+")
_TYPED_ID = re.compile(r"[a-z]{2,12}[_-]")
_AWS_SECRET = re.compile(r"(?=.*[+/])[A-Za-z0-9+/]{40}")
_DATA_URI = re.compile(r"data:[\w.+-]+/[\w.+-]+(?:;[\w.+-]+=[\w.+-]+)*;base64,$")


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text``'s own character frequencies."""
    counts = Counter(text)
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values()) if total else 0.0


def word_chars(text: str) -> float:
    """The mean length of ``text``'s words of letters as an identifier splits
    (``HTTPServerV2x`` -> HTTP, Server, V, x); digits and symbols only split them."""
    found = _WORD.findall(text)
    return sum(map(len, found)) / len(found) if found else 0.0


def entropy_limit(length: int) -> float:
    return RATIO * math.log2(min(max(length, 2), _MAX_ALPHABET))


def looks_random(token: str) -> bool:
    """Whether ``token`` (a run of the base64 alphabet) has the shape of a random key."""
    body = token.rstrip("=")
    if len(body) < MIN_CHARS or _HEX.fullmatch(body) or _TYPED_ID.match(body):
        return False
    if not (any(c.isupper() for c in body) and any(c.islower() for c in body)
            and any(c.isdigit() for c in body)):
        return False
    if sum(c in _SEPARATORS for c in body) > len(body) // 10 + 1:
        return False
    words_ok = word_chars(body) < MAX_WORD_CHARS or _AWS_SECRET.fullmatch(body) is not None
    return words_ok and shannon_entropy(body) >= entropy_limit(len(body))


def in_data_uri(text: str, start: int) -> bool:
    """Whether the token at ``start`` of ``text`` is a ``data:...;base64,`` payload."""
    return _DATA_URI.search(text, max(0, start - 200), start) is not None


def decoded_text(token: str) -> str | None:
    """The text ``token`` is base64 (standard or URL-safe) of, or None: not base64, or
    bytes that are not printable UTF-8 text (a key, an image)."""
    body = token.rstrip("=")
    if len(body) % 4 == 1:
        return None
    padded = body + "=" * (-len(body) % 4)
    altchars = b"-_" if ("-" in body or "_" in body) else None
    if altchars and ("+" in body or "/" in body):
        return None
    try:
        raw = base64.b64decode(padded, altchars=altchars, validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    printable = sum(c.isprintable() or c in "\n\r\t" for c in text)
    return text if text and printable == len(text) else None
