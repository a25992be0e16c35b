"""``sessions ingest`` on hostile inputs, through the CLI: a line of JSON nested beyond
any real record, named pipes, and a SIGTERM in the middle of an ingest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import fsck

from expgit.store.repository import ExperienceRepository

HELLO = [{"role": "user", "content": "Can I bring my cat in the cabin?"},
         {"role": "assistant", "content": "Yes, in a carrier under the seat."}]


def test_a_deeply_nested_line_is_counted_invalid(run_cli: Any, seeded_repo: ExperienceRepository,
                                                 tmp_path: Path) -> None:
    session = tmp_path / "deep.jsonl"
    session.write_text(json.dumps(HELLO[0]) + "\n" + "[" * 100_000 + "\n"
                       + '{"a": ' * 500 + "1" + "}" * 500 + "\n"  # valid, yet no record
                       + json.dumps(HELLO[1]) + "\n")
    out = run_cli("-C", tmp_path / "repo", "sessions", "ingest", session, "--agent", "bot",
                  "--json")
    assert out.code == 0, out.err
    data = json.loads(out.out)
    assert data["files"][0]["invalid_lines"] == [2, 3] and data["invalid_lines"] == 2
    assert data["files"][0]["messages"] == 2
    assert "2 invalid line(s) skipped: 2, 3" in out.err
    fsck(tmp_path / "repo")
