"""Redaction of secrets and personal data before anything is committed or sent to a model.

The one redactor of expgit: session transcripts, rollouts entering training, model output
before it becomes a gradient or proposal, outcome reasons, seed packs and SFT exports all
go through :func:`redact_text` (messages: :mod:`expgit.core.redaction.messages`).

Each finding is replaced by ``[REDACTED:<kind>]`` and counted by kind:

* ``private_key``: PEM private key blocks (also a block cut off before its END line);
* ``password``: the password of ``scheme://user:password@host`` URLs;
* ``api_key``: OpenAI / Anthropic (``sk-``, ``sk-ant-``), AWS access key ids (``AKIA``,
  ``ASIA``), GitHub (``ghp_``, ``github_pat_``, ...), Slack (``xox?-``), Google
  (``AIza``), Stripe (``sk_live_``), Hugging Face (``hf_``) keys;
* ``token``: JSON web tokens;
* ``bearer_token``: ``Bearer <token>`` and ``Authorization: Basic|Token <value>``;
* ``secret``: the value of an assignment to a secret-like name (``api_key=``,
  ``"password": "..."``, ``token: ...``, ``DB_PASSWORD=``, ``--password x``), and the
  value of a secret-like key in a tool call's input;
* ``high_entropy``: a bare random-looking token of 20 characters or more (an AWS secret
  access key without its label), as :mod:`expgit.core.redaction.entropy` judges it;
* ``home_path``: ``/home/<user>/``, ``/Users/<user>/``, ``C:\\Users\\<user>\\`` become
  ``~/``; ``user_name``: such a user name (3 characters or more) elsewhere in the same
  text, as a whole word;
* ``email``; ``card_number`` (13-19 digits, optionally grouped, with a card brand prefix
  and a valid Luhn checksum); ``phone`` (international ``+CC ...`` numbers, North
  American ``(555) 123-4567`` / ``555-123-4567``, national numbers with a trunk ``0``
  in groups, Chinese mobile numbers).

Ordinary numbers are left alone: dates, times, versions, IP addresses, amounts, hashes,
UUIDs and plain ids do not have these shapes (tuned on tests/fixtures/sessions/secrets;
the entropy check on tests/fixtures/secrets_entropy).
Redaction is idempotent: a redacted text has nothing left to redact.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable

from pydantic import BaseModel, Field

from expgit.core.redaction.entropy import CANDIDATE, decoded_text, in_data_uri, looks_random
from expgit.core.redaction.patterns import (
    SECRET_KEY,
    is_placeholder,
    secret_value_ok,
)

MARK = "[REDACTED:{}]"
_NOT_DONE = r"(?!\[REDACTED)"

Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str]], str | None]]


class Redaction(BaseModel):
    """How many findings of each kind were redacted."""

    counts: dict[str, int] = Field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @classmethod
    def of(cls, counter: Counter[str]) -> Redaction:
        return cls(counts={k: v for k, v in sorted(counter.items()) if v})

    def plus(self, other: Redaction) -> Redaction:
        return Redaction.of(Counter(self.counts) + Counter(other.counts))


def _whole(kind: str) -> Callable[[re.Match[str]], str | None]:
    return lambda m: MARK.format(kind)


def _keep_prefix(kind: str) -> Callable[[re.Match[str]], str | None]:
    """Replace group 2, keeping group 1 (a key, a scheme and user, ``Bearer ``)."""
    return lambda m: m.group(1) + MARK.format(kind)


def _luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char) * (2 if index % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


_CARD_PREFIX = re.compile(r"4|5[1-5]|2[2-7]|3[47]|3[068]|35|6(?:011|5|4[4-9]|2)")


def _card(match: re.Match[str]) -> str | None:
    digits = re.sub(r"\D", "", match.group(0))
    ok = 13 <= len(digits) <= 19 and _CARD_PREFIX.match(digits) and _luhn(digits)
    return MARK.format("card_number") if ok else None


def _phone_digits(low: int, high: int) -> Callable[[re.Match[str]], str | None]:
    def check(match: re.Match[str]) -> str | None:
        count = sum(c.isdigit() for c in match.group(0))
        return MARK.format("phone") if low <= count <= high else None

    return check


def _secret(match: re.Match[str]) -> str | None:
    """``pre`` (the key, separator, opening quote) kept; ``value`` replaced."""
    quoted = match.group("pre")[-1:] in ("'", '"')
    if not secret_value_ok(match.group("key"), match.group("value"), quoted):
        return None
    return match.group("pre") + MARK.format("secret") + (match.groupdict().get("post") or "")


def _email(match: re.Match[str]) -> str | None:
    """An address, but not ``git@host`` (an SSH remote, nobody's address)."""
    return None if match.group(0).startswith("git@") else MARK.format("email")


def _bearer(match: re.Match[str]) -> str | None:
    value = match.group(2)
    if len(value) < 24 and not any(c.isdigit() for c in value):
        return None  # "bearer instruments", not a token
    return match.group(1) + MARK.format("bearer_token")


def _high_entropy(match: re.Match[str]) -> str | None:
    """A random-looking token; not a data URI's payload, nor base64 of a text without a
    secret (a JSON blob in a tool output)."""
    token = match.group(0)
    if not looks_random(token) or in_data_uri(match.string, match.start()):
        return None
    text = decoded_text(token)
    if text is not None and not secrets_in(text):
        return None
    return MARK.format("high_entropy")


_B = r"(?<![A-Za-z0-9_])"  # a token starts here
_E = r"(?![A-Za-z0-9_])"
RULES: list[Rule] = [
    ("private_key", re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----"
        r"|(?:\r?\n(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+: [^\n]*))*)"), _whole("private_key")),
    ("password", re.compile(
        r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@\[\]]+:)" + _NOT_DONE + r"([^\s@/]+)(?=@)"),
     _keep_prefix("password")),
    ("api_key", re.compile(
        _B + r"(?:sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"
        r"|(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}"
        r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}"
        r"|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}"
        r"|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|hf_[A-Za-z0-9]{30,})" + _E), _whole("api_key")),
    ("token", re.compile(_B + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
     _whole("token")),
    ("bearer_token", re.compile(
        r"(?i)(\bbearer\s+|\bauthorization[\"']?\s*[:=]\s*[\"']?(?:basic|token|digest)\s+)"
        + _NOT_DONE + r"([A-Za-z0-9\-._~+/]{12,}=*)"), _bearer),
    ("secret", re.compile(  # a quoted value (spaces allowed)
        r"(?i)(?P<pre>(?<![A-Za-z0-9])(?P<key>" + SECRET_KEY + r")[\"']?\s*(?::|=|=>)\s*"
        r"(?P<q>[\"']))" + _NOT_DONE + r"(?P<value>[^\"'\n]{1,200}?)(?P<post>(?P=q))"), _secret),
    ("secret", re.compile(  # an unquoted value (not a call or subscript: getpass())
        r"(?i)(?P<pre>(?<![A-Za-z0-9])(?P<key>" + SECRET_KEY + r")[\"']?[ \t]*(?::|=|=>)[ \t]*)"
        + _NOT_DONE + r"(?P<value>[^\s\"'`,;(){}\[\]<>]++)(?![(\[])"), _secret),
    ("secret", re.compile(
        r"(?i)(?P<pre>(?<![\w-])--(?P<key>password|passwd|token|api-key|secret|client-secret)"
        r"[ =])" + _NOT_DONE + r"(?P<value>[^\s\"']++)"), _secret),
    ("high_entropy", CANDIDATE, _high_entropy),
    ("email", re.compile(r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
                         r"\.[A-Za-z]{2,}" + _E), _email),
    ("card_number", re.compile(r"(?<![\w.,+-])\d(?:[ -]?\d){12,18}(?![\w-]|[.,]\d)"), _card),
    ("phone", re.compile(r"(?<![\w+])\+\d{1,3}(?:[ .-]?\(?\d{1,5}\)?){1,5}(?![\w-]|[.,]\d)"),
     _phone_digits(8, 15)),
    ("phone", re.compile(r"(?<![\w.,+-])(?:\(\d{3}\)\s?|\d{3}[-. ])\d{3}[-. ]\d{4}"
                         r"(?![\w-]|[.,]\d)"), _phone_digits(10, 10)),
    ("phone", re.compile(r"(?<![\w.,+-])0\d{1,4}[ /-]\d{3,4}[ -]?\d{3,4}(?![\w-]|[.,]\d)"),
     _phone_digits(9, 12)),
    ("phone", re.compile(r"(?<![\w.,+-])1[3-9]\d(?:[ -]?\d{4}){2}(?![\w-]|[.,]\d)"),
     _phone_digits(11, 11)),
]


_HOME = re.compile(r"(?:/home/|/Users/|[A-Za-z]:[\\/]+Users[\\/]+)"
                   r"([A-Za-z0-9._-]+)(?=[\\/]|$|[\s\"'`),;:])")
_NOT_NAMES = {"shared", "public", "default", "all users", "runner"}


def user_names(text: str) -> set[str]:
    """The user names of the home folders ``text`` mentions (3 characters or more)."""
    return {m.group(1) for m in _HOME.finditer(text)
            if len(m.group(1)) >= 3 and m.group(1).lower() not in _NOT_NAMES}


def _home(text: str, names: Iterable[str], counts: Counter[str]) -> str:
    def home(match: re.Match[str]) -> str:
        counts["home_path"] += 1
        return "~"

    text = _HOME.sub(home, text)
    for name in sorted(set(names), key=len, reverse=True):
        pattern = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])")
        text, found = pattern.subn(MARK.format("user_name"), text)
        counts["user_name"] += found
    return text


def redact_text(text: str, names: Iterable[str] = ()) -> tuple[str, Counter[str]]:
    """``text`` with every finding replaced by ``[REDACTED:<kind>]``, and the counts.
    ``names``: user names to redact besides those of the home folders in ``text``
    (those of the same document)."""
    counts: Counter[str] = Counter()
    text = _home(text, {*names, *user_names(text)}, counts)
    for kind, pattern, replace in RULES:
        def substitute(match: re.Match[str], kind: str = kind,
                       replace: Callable[[re.Match[str]], str | None] = replace) -> str:
            new = replace(match)
            if new is None:
                return match.group(0)
            counts[kind] += 1
            return new

        text = pattern.sub(substitute, text)
    return text, counts


def redact_value(value: object, counts: Counter[str], key: str | None = None,
                 names: Iterable[str] = ()) -> object:
    """A JSON-like value redacted recursively; the values of secret-like keys whole."""
    if isinstance(value, str):
        if key is not None and _secret_key(key) and value and not is_placeholder(value) \
                and not value.startswith("[REDACTED"):
            counts["secret"] += 1
            return MARK.format("secret")
        new, found = redact_text(value, names)
        counts.update(found)
        return new
    if isinstance(value, dict):
        return {k: redact_value(v, counts, str(k), names) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v, counts, None, names) for v in value]
    return value


_KEY = re.compile(r"(?i)" + SECRET_KEY)


def _secret_key(key: str) -> bool:
    return _KEY.fullmatch(key) is not None


SECRET_KINDS = ("private_key", "password", "api_key", "token", "bearer_token", "secret",
                "high_entropy")


def secrets_in(text: str) -> list[str]:
    """The kinds of secret ``text`` holds (nothing personal: emails, phones are not
    secrets); an edit a model wrote with one of these is refused, not redacted."""
    _, counts = redact_text(text)
    return [kind for kind in SECRET_KINDS if counts.get(kind)]


CUT_MARK = "\n[... {:,} characters removed ...]\n"
_MARK_ROOM = len(CUT_MARK.format(10 ** 15))  # a cut text is never cut again


def cap_text(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to about ``limit`` characters: its head and tail kept around a line
    saying how much was removed; and the number of characters removed (0: unchanged).
    A text cut once is not cut again."""
    if len(text) <= limit + _MARK_ROOM:
        return text, 0
    head = limit * 2 // 3
    tail = limit - head
    removed = len(text) - head - tail
    return text[:head] + CUT_MARK.format(removed) + text[len(text) - tail:], removed
