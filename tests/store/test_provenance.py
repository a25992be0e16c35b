"""Model provenance (issue 25 item 3): the endpoint as a scheme-less host and port (never
a key, a user or a path), the embedded model's GGUF hash computed once and cached by
size and modification time, trailer values one redacted line, and the trailers read back
from a commit message."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from pydantic import JsonValue
from scripted_pipeline import PETS_CASE

from expgit.core.domain import Rollout
from expgit.llm import provenance as llm_provenance
from expgit.llm.factory import LLMRuntime, ResolvedLLM
from expgit.llm.port import UsageMeter
from expgit.llm.provenance import endpoint_host, gguf_sha256
from expgit.remote.protocol import Health
from expgit.runs.provenance import recorded_agent, service_agent
from expgit.store.derived.cache import DerivedIndex
from expgit.store.format import trailers as tr
from expgit.store.format.provenance import Provenance, of_message
from expgit.store.format.settings import LLMSettings


@pytest.mark.parametrize(("url", "host"), [
    (None, "api.openai.com"),
    ("https://api.openai.com/v1", "api.openai.com"),
    ("http://127.0.0.1:8080/v1", "127.0.0.1:8080"),
    ("https://user:sk-secret@llm.example.com:8443/v1?key=sk-x#frag", "llm.example.com:8443"),
    ("llm.example.com:9000/v1", "llm.example.com:9000"),
    ("http://[::1]:11434/v1", "[::1]:11434"),
])
def test_the_endpoint_is_its_host_and_port_only(url: str | None, host: str) -> None:
    assert endpoint_host(url) == host


def test_the_gguf_hash_is_computed_once_and_cached_by_size_and_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    cache = tmp_path / "cache" / "index.sqlite3"
    calls: list[Path] = []
    real = llm_provenance.hash_file
    def hash_file(path: Path) -> str:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(llm_provenance, "hash_file", hash_file)
    monkeypatch.setattr(llm_provenance, "_memo", {})
    first = gguf_sha256(model, cache)
    assert len(first) == 64 and first == real(model)
    assert gguf_sha256(model, cache) == first and len(calls) == 1  # this process
    monkeypatch.setattr(llm_provenance, "_memo", {})  # the next process: the file cache
    assert gguf_sha256(model, cache) == first and len(calls) == 1
    model.write_bytes(model.read_bytes() + b"x")  # a new file: hashed again
    os.utime(model, ns=(1, 1))
    second = gguf_sha256(model, cache)
    assert second != first and second == real(model) and len(calls) == 2
    with DerivedIndex(sqlite3.connect(cache)) as ix:  # one entry a file
        assert ix.db.execute("SELECT sha256 FROM gguf_sha256").fetchall() == [(second,)]
    cache.write_bytes(b"not sqlite" * 1000)  # a broken cache costs the hashing only
    monkeypatch.setattr(llm_provenance, "_memo", {})
    assert gguf_sha256(model, cache) == second and len(calls) == 3


def test_the_runtime_names_the_embedded_model_and_its_file_hash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    model = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    model.write_bytes(b"GGUF weights")
    local = LLMRuntime(LLMSettings(), ResolvedLLM("local", "SmolLM2-135M-Instruct", None,
                                                  None, "json_object", model), UsageMeter())
    made = local.provenance()
    assert made == Provenance(agent_model="SmolLM2-135M-Instruct",
                              trainer_model="SmolLM2-135M-Instruct", endpoint="embedded",
                              model_sha256=llm_provenance.hash_file(model))
    assert (tmp_path / "xdg" / "expgit" / "index.sqlite3").exists()
    api = LLMRuntime(LLMSettings(), ResolvedLLM("openai", "gpt-4o-mini",
                                                "https://u:p@llm.example.com/v1", "sk-k",
                                                "json_schema"), UsageMeter())
    assert api.provenance("agent-x").trailers() == (
        ("Expgit-Agent-Model", "agent-x"), ("Expgit-Trainer-Model", "gpt-4o-mini"),
        ("Expgit-Endpoint", "llm.example.com"))


def test_values_are_one_redacted_line_and_read_back_from_the_trailers() -> None:
    made = Provenance(agent_model="my\nmodel  sk-proj-Abc123Def456Ghi789Jkl012Mno345",
                      trainer_model="t" * 500, endpoint="h:1")
    assert made.agent_model == "my model [REDACTED:api_key]"
    assert made.trainer_model == "t" * 120
    message = tr.Message("proposal", "body", (("Expgit-Gradient", "a" * 40),
                                              *made.trailers()))
    assert of_message(tr.parse_message(message.render())) == made
    assert of_message(tr.parse_message("by hand\n\nExpgit-Target: x\n")) is None


def test_the_agent_of_a_service_and_of_recorded_rollouts() -> None:
    health = Health(service="expgit-env", version="1", metadata={
        "llm": "local SmolLM2-135M-Instruct at http://127.0.0.1:5000/v1"})
    assert service_agent(health) == "SmolLM2-135M-Instruct"
    assert service_agent(Health(service="env", version="1")) == "unknown (env)"
    case = PETS_CASE

    def rollout(**metadata: JsonValue) -> Rollout:
        return Rollout(case=case, policy_snapshot_id="s", metadata=metadata)

    assert recorded_agent([rollout(agent_model="gpt-4.1"), rollout(model="gpt-4.1")]) == "gpt-4.1"
    assert recorded_agent([rollout(model="a"), rollout(model="b")]) == \
        "unknown (recorded rollouts)"
    assert recorded_agent([rollout()]) == "unknown (recorded rollouts)"
