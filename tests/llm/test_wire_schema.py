"""The schema on the wire: every OpenAI-compatible server can compile it.

Grammar-compiling servers (llama.cpp, Ollama) spell a ``maxLength`` out rule by rule; the
estimate schema's long bounds for API endpoints made llama.cpp refuse the grammar and its
server die. The wire schema leaves length and count bounds out, and validation still
enforces them. Where ``llama-cpp-python[server]`` is installed (CI), its real server,
unpatched, compiles every output schema with the API limits.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest
from pydantic import BaseModel

from expgit.llm.local import find_gguf
from expgit.llm.port import Completion, LLMOutputError, UsageMeter
from expgit.llm.structured import StructuredLLM, output_schema, wire_schema
from expgit.sessions.ingest.segment_output import SegmentOutput
from expgit.sessions.score_output import ScoreOutput
from expgit.train.components.evaluator import JudgeVerdict
from expgit.train.components.llm_fields import AnalysisLimits, EditLimits
from expgit.train.components.llm_outputs import (
    analyze_output,
    estimate_output,
    merge_output,
    reflect_output,
)

API_OUTPUTS: list[type[BaseModel]] = [
    estimate_output(EditLimits()), merge_output(EditLimits(), 16),
    analyze_output(AnalysisLimits()), reflect_output(AnalysisLimits(), EditLimits()),
    JudgeVerdict, SegmentOutput, ScoreOutput]


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in _keys(v)}
    if isinstance(node, list):
        return {k for v in node for k in _keys(v)}
    return set()


def test_the_wire_schema_has_no_length_bounds_and_the_reply_is_still_checked() -> None:
    estimate = estimate_output(EditLimits())
    assert "maxLength" in _keys(output_schema(estimate)[0])  # the model has bounds
    for output in API_OUTPUTS:
        assert not _keys(wire_schema(output)) & {"maxLength", "maxItems", "maxProperties"}
        assert wire_schema(output, bounded=True) == output_schema(output)[0]


class _Capture:
    model = "capture"

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.formats: list[dict[str, Any] | None] = []

    async def complete(self, messages: Any, *, stage: str,
                       response_format: dict[str, Any] | None, max_tokens: int,
                       temperature: float, seed: int | None = None) -> Completion:
        self.formats.append(response_format)
        return Completion(text=self.reply, finish_reason="stop")


def test_the_request_carries_the_wire_schema_and_validation_keeps_the_bounds() -> None:
    from pydantic import Field, create_model

    bounded = create_model("Bounded", word=(str, Field(max_length=5)))
    chat = _Capture(json.dumps({"word": "far too long"}))
    llm = StructuredLLM(chat, UsageMeter())
    with pytest.raises(LLMOutputError, match="does not match the schema"):
        asyncio.run(llm.generate("judge", "system", "user", bounded))
    sent = chat.formats[0]
    assert sent is not None and sent["json_schema"]["schema"] == wire_schema(bounded)
    assert "maxLength" not in json.dumps(sent)
    embedded = StructuredLLM(_Capture('{"word": "ok"}'), UsageMeter(), grammar_bounds=True)
    asyncio.run(embedded.generate("judge", "system", "user", bounded))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server_available() -> bool:
    if importlib.util.find_spec("llama_cpp") is None or \
            importlib.util.find_spec("llama_cpp.server") is None:
        return False
    try:
        find_gguf()
    except Exception:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not _server_available(),
                    reason="the [local] extra (llama-cpp-python[server]) is not installed")
def test_an_unpatched_llama_cpp_server_compiles_every_api_schema(tmp_path: Any) -> None:
    """llama.cpp's own server as an ordinary endpoint (not ``--llm local``): each output
    schema with the API limits, as ``json_object`` sends it, is compiled and answered, and
    the server is still up afterwards."""
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model",
                             str(find_gguf()), "--port", str(port), "--n_ctx", "2048"],
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
            try:
                urllib.request.urlopen(f"{base}/models", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.5)
        for output in API_OUTPUTS:
            body = {"messages": [{"role": "user", "content": "Reply with JSON."}],
                    "max_tokens": 4, "temperature": 0,
                    "response_format": {"type": "json_object", "schema": wire_schema(output)}}
            request = urllib.request.Request(f"{base}/chat/completions",
                                             data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                assert response.status == 200, output.__name__
            assert proc.poll() is None, (output.__name__,
                                         (tmp_path / "server.log").read_text()[-2000:])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
