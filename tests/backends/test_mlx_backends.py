"""The MLX backends for real on MLX's CPU backend: mlx-whisper (a tiny random Whisper) and
mlx-lm (SmolLM2-135M from the bundled GGUF), their errors, and the MLX lock between them."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import threading
import time

import pytest

from engine.backends import BackendRegistry, mlx_guard
from engine.backends.base import LlmStep, LoadRequest, SttResult, no_progress
from engine.config import STAGES, EngineConfig, LlmConfig, SttConfig
from engine.runtime.devices import CPU
from engine.errors import ConfigError, DeviceError, MissingDependencyError, ModelError
from engine.runtime.mlx_lock import MlxLock, working_for
from tests.support.llm import options
from tests.support.mlx import MLX, QUESTION

pytestmark = pytest.mark.slow


def _never() -> bool:
    return False


# ---------------------------------------------------------------------- STT
def test_mlx_whisper_transcribes_real_speech_inside_the_lock(mlx_stt, mlx_lock_traced, jfk_16k):
    before = mlx_lock_traced.snapshot().acquisitions
    with mlx_guard.guarded("raise", lock=mlx_lock_traced):  # any MLX call outside the lock raises
        result = mlx_stt.transcribe(jfk_16k, unit=0)
    assert isinstance(result, SttResult) and isinstance(result.text, str) and result.text
    assert result.audio_seconds == pytest.approx(11.0, abs=0.1)
    assert result.compute_seconds > 0
    assert mlx_lock_traced.snapshot().acquisitions == before + 1
    last = mlx_lock_traced.trace()[-1]
    assert (last.stage, last.unit) == ("stt", 0)
    assert mlx_stt.actual_device == "mlx" and mlx_stt.compute_device in ("cpu", "gpu")
    assert mlx_stt.dtype == ("float16" if mlx_stt.compute_device == "gpu" else "float32")
    assert mlx_stt.transcribe(jfk_16k[:0]) == SttResult("", 0.0, 0.0)


def test_mlx_whisper_load_uses_the_process_lock(tiny_mlx_whisper_dir):
    from engine.runtime import mlx_lock
    from engine.backends.stt import mlx_whisper

    mine = MlxLock()
    old = mlx_lock.set_mlx_lock(mine)
    try:
        stt = mlx_whisper.load(LoadRequest(str(tiny_mlx_whisper_dir), MLX, "float32",
                                           SttConfig()), no_progress)
    finally:
        mlx_lock.set_mlx_lock(old)
    assert stt.lock is mine and mine.snapshot().stages[0].stage == "stt"
    with pytest.raises(ConfigError, match="English-only"):
        stt.check_language("de")


def test_mlx_whisper_errors_name_the_folder(tmp_path):
    from engine.backends.stt import mlx_whisper

    folder = tmp_path / "no-weights"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    request = LoadRequest(str(folder), MLX, "auto", SttConfig())
    with pytest.raises(ModelError, match=f"{folder}.* has no weights.safetensors"):
        mlx_whisper.load(request, no_progress)
    (folder / "config.json").unlink()
    with pytest.raises(ModelError, match=f"{folder} has no config.json"):
        mlx_whisper.load(request, no_progress)
    with pytest.raises(ModelError, match="does not exist"):
        mlx_whisper.load(dataclasses.replace(request, model=str(tmp_path / "nowhere")), no_progress)
    with pytest.raises(DeviceError, match="runs on mlx, not on cpu"):
        mlx_whisper.load(dataclasses.replace(request, device=CPU), no_progress)
    with pytest.raises(ModelError, match="not in the Hugging Face cache"):
        mlx_whisper.load(dataclasses.replace(request, model="nobody-here/no-such-whisper"),
                         no_progress)


# ---------------------------------------------------------------------- LLM
def test_mlx_lm_streams_paris_stops_early_and_reuses_the_cache(mlx_llm, mlx_lock_traced):
    session = mlx_llm.new_session(unit=1)
    before = mlx_lock_traced.snapshot().acquisitions
    started = time.perf_counter()
    with mlx_guard.guarded("raise", lock=mlx_lock_traced):  # any MLX call outside the lock raises
        steps = list(session.generate(QUESTION, options(16), _never))
    seconds = time.perf_counter() - started
    text = "".join(step.text for step in steps)
    print(f"\nmlx-lm SmolLM2-135M: {text!r} ({steps[-1].tokens} tokens in {seconds:.1f} s, "
          f"prefill {steps[0].prefill_seconds:.2f} s, {steps[-1].tokens_per_second:.1f} tok/s)")
    assert "Paris" in text
    assert len(steps) >= 5 and all(isinstance(s, LlmStep) for s in steps)
    assert steps[-1].finished and not any(s.finished for s in steps[:-1])
    first_prompt = len(session.prompt_ids(QUESTION))
    assert steps[-1].prompt_tokens == first_prompt
    assert steps[-1].tokens_per_second > 0 and steps[0].prefill_seconds > 0
    assert steps[-1].peak_memory_bytes and steps[-1].peak_memory_bytes > 100e6  # ~0.5 GB fp32
    # One hold to set up, one per step (the first one prefills), one to close.
    assert mlx_lock_traced.snapshot().acquisitions - before == len(steps) + 2
    holds = mlx_lock_traced.trace()[-(len(steps) + 2):]
    assert {(h.stage, h.unit) for h in holds} == {("llm", 1)}

    # Next turn: stopped after two tokens, and only the new tokens are prefilled.
    asked = []

    def stop_after_two() -> bool:
        asked.append(1)
        return len(asked) > 2

    follow_up = QUESTION + [{"role": "assistant", "content": text},
                            {"role": "user", "content": "And Italy?"}]
    full = len(session.prompt_ids(follow_up))
    steps = list(session.generate(follow_up, options(40), stop_after_two))
    assert len(steps) == 2 and not steps[-1].finished
    assert len(asked) == 3  # checked before the first token, then before each next one
    # The template may re-render the end of the first reply a little differently.
    assert 0 < steps[0].prompt_tokens <= full - first_prompt + 2


def test_mlx_lm_errors_name_the_folder(tmp_path):
    from engine.backends.llm import mlx_lm

    folder = tmp_path / "half-model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    request = LoadRequest(str(folder), MLX, "auto", LlmConfig())
    with pytest.raises(ModelError, match=f"{folder} has no weights"):
        mlx_lm.load(request, no_progress)
    with pytest.raises(ModelError, match="GGUF model file not found"):
        mlx_lm.load(dataclasses.replace(request, model=str(tmp_path / "x.gguf")), no_progress)
    with pytest.raises(ConfigError, match=r"'llm\.dtype' = 'int3'"):
        mlx_lm.load(dataclasses.replace(request, dtype="int3"), no_progress)
    with pytest.raises(DeviceError, match="runs on mlx"):
        mlx_lm.load(dataclasses.replace(request, device=CPU), no_progress)
    with pytest.raises(ModelError, match="not in the Hugging Face cache"):
        mlx_lm.load(dataclasses.replace(request, model="nobody-here/no-such-llm"), no_progress)


# ---------------------------------------------------------------------- placement
def test_mlx_device_without_mlx_installed_gives_the_pip_command(monkeypatch):
    from engine.models.placement import resolve_placements

    real_find_spec = importlib.util.find_spec
    hidden = {"mlx", "mlx_whisper", "mlx_lm"}

    def find_spec(name, *args, **kwargs):
        return None if name.split(".")[0] in hidden else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    registry = BackendRegistry()
    with pytest.raises(MissingDependencyError, match=r"pip install 'parley\[mlx\]'"):
        registry.get("stt", "mlx-whisper").ensure_installed()
    config = EngineConfig().with_overrides({"stt.device": "mlx"})
    with pytest.raises(MissingDependencyError, match=r"mlx-whisper.*pip install 'parley\[mlx\]'"):
        resolve_placements(config, registry=registry)
    # A registry whose mlx spec needs a module that is simply not there, mlx itself present.
    monkeypatch.setattr(importlib.util, "find_spec", real_find_spec)
    specs = [s for stage in STAGES for s in registry.specs(stage)]
    specs = tuple(dataclasses.replace(s, requires=("parley_no_such_mlx_module",))
                  if s.name == "mlx-lm" else s for s in specs)
    with pytest.raises(MissingDependencyError, match="pip install"):
        resolve_placements(EngineConfig().with_overrides({"llm.backend": "mlx-lm"}),
                           registry=BackendRegistry(specs))


# ---------------------------------------------------------------------- contention
def test_stt_and_llm_on_two_threads_take_turns_on_the_lock(mlx_stt, mlx_llm, mlx_lock_traced,
                                                           jfk_16k):
    lock = mlx_lock_traced
    lock.reset_stats()
    errors: list[BaseException] = []
    llm_running = threading.Event()
    replies: list[str] = []

    def stt_work():
        try:
            with working_for(0):  # as unit 0's STT stage thread works
                assert llm_running.wait(60)
                for _ in range(2):
                    mlx_stt.transcribe(jfk_16k)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def llm_work():
        try:
            with working_for(1):  # as unit 1's LLM stage thread works
                session = mlx_llm.new_session()
                steps = []
                for step in session.generate(QUESTION, options(12), _never):
                    steps.append(step)
                    llm_running.set()
                replies.append("".join(s.text for s in steps))
        except BaseException as exc:  # noqa: BLE001
            llm_running.set()
            errors.append(exc)

    # Names of other units' stages: the label comes from working_for, never the name.
    threads = [threading.Thread(target=stt_work, name="parley-u5-stt"),
               threading.Thread(target=llm_work, name="parley-u6-llm")]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 300
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "deadlock: a thread never finished"
    assert not errors, errors
    snap = lock.snapshot()
    records = lock.trace()
    assert len(records) == snap.acquisitions and snap.holder is None
    ordered = sorted(records, key=lambda r: r.acquired)
    for before, after in itertools.pairwise(ordered):
        assert after.acquired >= before.released, "two MLX holds overlapped"
    units = {(r.stage, r.unit) for r in records}
    assert units == {("stt", 0), ("llm", 1)}  # the units the threads work for, not their names
    assert snap.contended > 0
    assert sum(r.wait for r in records) == pytest.approx(snap.wait_total, abs=1e-6)
    by_stage = {s.stage: s for s in snap.stages}
    assert by_stage["stt"].acquisitions == 2
    # Per-token holds: STT got the lock while the reply was still being generated.
    llm_times = [r.acquired for r in ordered if r.stage == "llm"]
    stt_times = [r.acquired for r in ordered if r.stage == "stt"]
    assert any(llm_times[0] < t < llm_times[-1] for t in stt_times)
    print(f"\ncontention: {snap.acquisitions} holds, {snap.contended} contended, "
          f"wait total {snap.wait_total:.2f} s (max {snap.wait_max:.2f} s), "
          f"hold total {snap.hold_total:.2f} s, p50 {snap.hold_p50 * 1e3:.0f} ms; "
          f"reply {replies[0]!r}")
