"""The cost of the high-entropy check in the one redactor (run by hand; asserts nothing).

    python benchmarks/bench_redact.py [--repeat 5]

Times :func:`expgit.core.redaction.text.redact_text` over three texts: prose and tool output
(the calibration corpus tests/fixtures/secrets_entropy/ordinary.txt, repeated to 1 MB),
a JSON tool output of ids, hashes and base64 blobs (1 MB), and a 1 MB text that is all
candidates (random 40-character keys). Each is timed with every rule, then without the
``high_entropy`` rule, and the ratio printed: what the check adds to each redaction.
Each figure is the best of ``--repeat`` interleaved runs.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import string
import time
from pathlib import Path

from expgit.core.redaction import text as redact

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "secrets_entropy"
MB = 1 << 20


def texts(rng: random.Random) -> dict[str, str]:
    prose = (CORPUS / "ordinary.txt").read_text()
    rows = [{"id": f"{rng.getrandbits(160):040x}", "uuid": f"{rng.getrandbits(128):032x}",
             "user_id": f"mia_li_{rng.randrange(10**4)}", "reservation": "ZFA04Y",
             "blob": base64.b64encode(json.dumps({"n": i}).encode()).decode()}
            for i in range(6000)]
    alphabet = string.ascii_letters + string.digits + "+/"
    keys = " ".join("".join(rng.choice(alphabet) for _ in range(40)) for _ in range(26000))
    return {"prose": (prose * (MB // len(prose) + 1))[:MB],
            "tool output": json.dumps(rows)[:MB], "all keys": keys[:MB]}


def seconds(text: str, rules: list[redact.Rule]) -> float:
    redact.RULES[:] = rules
    start = time.perf_counter()
    redact.redact_text(text)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rules = list(redact.RULES)
    without = [rule for rule in rules if rule[0] != "high_entropy"]
    print(f"{'text (1 MB)':<14} {'all rules ms':>13} {'without ms':>11} {'ratio':>6}")
    for name, text in texts(random.Random(25)).items():
        # interleaved, the best of each: a shared machine's noise hits both alike
        full = base = float("inf")
        for _ in range(args.repeat):
            full = min(full, seconds(text, rules))
            base = min(base, seconds(text, without))
        redact.RULES[:] = rules
        print(f"{name:<14} {full * 1000:>13.1f} {base * 1000:>11.1f} {full / base:>6.2f}")


if __name__ == "__main__":
    main()
