"""The onnxruntime-genai LLM backend on the real bundled SmolLM2 (int4 ONNX, converted once
per session), and the torch-free chat tokenizer it reads prompts with."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.backends import BackendRegistry
from engine.backends.base import GenerationOptions, LoadRequest
from engine.backends.llm.chat_tokenizer import ChatTokenizer
from engine.backends.llm.local_session import TEXT_SIGNAL_WORDS
from engine.config import LlmConfig
from engine.errors import ConfigError, DeviceError, MissingDependencyError
from engine.runtime.devices import CPU, Device
from tests.backends.test_tool_calls import QWEN_TOOLS

pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data" / "tool_calls"
SYSTEM = {"role": "system", "content": "You are a helpful voice assistant. Keep answers short."}
OPTIONS = GenerationOptions(max_new_tokens=40, repetition_penalty=1.3, no_repeat_ngram_size=4)


@pytest.fixture(scope="module")
def onnx_llm(smollm2_conversion):
    """SmolLM2 through the backend's own ``load`` from the .gguf path (converted once)."""
    from engine.backends.llm.onnx_genai import load

    return load(LoadRequest(str(smollm2_conversion.gguf), CPU, "auto", LlmConfig()))


def reply(session, messages, options=OPTIONS, should_stop=lambda: False):
    steps = list(session.generate(messages, options, should_stop))
    return steps, "".join(step.text for step in steps)


def test_it_streams_a_right_answer_without_importing_torch(onnx_llm):
    session = onnx_llm.new_session()
    steps, text = reply(session, [SYSTEM, {"role": "user", "content": "What is the capital of France?"}])
    assert "paris" in text.lower()
    assert len(steps) > 3 and steps[-1].finished and not any(s.finished for s in steps[:-1])
    assert steps[-1].tokens == len(steps) - 1 or steps[-1].tokens == len(steps)
    assert onnx_llm.actual_device == "cpu" and onnx_llm.dtype == "int4"
    assert onnx_llm.weights_bytes and onnx_llm.weights_bytes > 10_000_000
    # A fresh interpreter that loads and answers never imports torch or transformers.
    code = ("import sys; from engine.backends.llm.onnx_genai import load, bundled_model;"
            "from engine.backends.base import LoadRequest, GenerationOptions;"
            "from engine.config import LlmConfig; from engine.runtime.devices import CPU;"
            "llm = load(LoadRequest(bundled_model(), CPU, 'auto', LlmConfig()));"
            "s = llm.new_session(); list(s.generate([{'role': 'user', 'content': 'Hi'}],"
            " GenerationOptions(max_new_tokens=3), lambda: False));"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_other_python_threads_run_while_the_model_computes(onnx_llm):
    """The decoder releases the GIL: a thread ticking every millisecond keeps ticking
    through a long prefill (onnxruntime-genai's generator held it for the whole call, so
    the VAD, the audio going out and the server's loop stood still meanwhile)."""
    import threading
    import time

    ids = onnx_llm.encode(" ".join(["the quick brown fox jumps over the lazy dog"] * 40))
    ticks: list[float] = []
    done = threading.Event()

    def tick() -> None:
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        time.sleep(0.02)
        started = time.perf_counter()
        onnx_llm.run(ids, onnx_llm.decoder.empty_cache(), 0)
        ended = time.perf_counter()
    finally:
        done.set()
        ticker.join()
    during = [t for t in ticks if started <= t <= ended]
    gaps = [b - a for a, b in zip([started, *during], [*during, ended])]
    # A held GIL shows as one gap as long as the call; released, the ticker keeps going.
    assert len(during) >= 5 and max(gaps) < 0.5 * (ended - started), (len(during), max(gaps),
                                                                       ended - started)


def test_the_second_turn_prefills_only_what_is_new(onnx_llm):
    session = onnx_llm.new_session()
    first_turn = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]
    steps, text = reply(session, first_turn)
    first_prompt = len(session.prompt_ids(first_turn))
    assert steps[0].prompt_tokens == first_prompt
    second_turn = first_turn + [{"role": "assistant", "content": text},
                                {"role": "user", "content": "And of Spain?"}]
    steps2, text2 = reply(session, second_turn)
    full = session.prompt_ids(second_turn)
    assert text2.strip()
    # Only the tokens after what the generator holds ran: fewer than the first prompt,
    # far fewer than the whole second prompt.
    assert 0 < steps2[0].prompt_tokens < first_prompt < len(full)
    session.reset()
    steps3, _ = reply(session, second_turn)
    assert steps3[0].prompt_tokens == len(full)


def test_a_changed_history_rewinds_to_the_common_prefix(onnx_llm):
    from engine.backends.llm import reusable_prefix

    session = onnx_llm.new_session()
    reply(session, [SYSTEM, {"role": "user", "content": "Tell me about the moon and its phases."}])
    held = list(session._cached_ids)
    other = [SYSTEM, {"role": "user", "content": "Name a colour."}]
    other_ids = session.prompt_ids(other)
    common = reusable_prefix(held, other_ids)
    assert common > 10  # the system prompt at least
    steps, text = reply(session, other)
    assert text.strip()
    assert steps[0].prompt_tokens == len(other_ids) - common


def test_cancellation_is_checked_before_every_token(onnx_llm):
    session = onnx_llm.new_session()
    count = 0

    def stop_after_three():
        return count >= 3

    messages = [SYSTEM, {"role": "user", "content": "Count from one to twenty."}]
    for _step in session.generate(messages, GenerationOptions(max_new_tokens=40), stop_after_three):
        count += 1
    assert count == 3
    # The session is still usable: the next reply prefills on top of what was run.
    steps, text = reply(session, messages)
    assert text.strip() and steps[-1].finished


def test_the_text_signal_tells_a_finished_sentence_from_a_cut_one(onnx_llm):
    # The learned end of turn's text signal, on the user's words alone; Whisper's own
    # final period is dropped, so the cut clause scores as low with it as without it.
    assert onnx_llm.end_of_turn_signal()
    session = onnx_llm.new_session()
    finished = session.sentence_end_probability("What is the capital of France?")
    cut = session.sentence_end_probability("What is the capital of")
    cut_with_period = session.sentence_end_probability("What is the capital of.")
    assert 0.0 <= cut < 0.1 < 0.3 < finished <= 1.0
    assert cut_with_period == pytest.approx(cut, abs=1e-3)
    assert session.sentence_end_probability(" ... ") == 0.0
    # Whisper's period inside the words (it puts one where the speaker only paused) is
    # read as a comma: the clause after it is not scored as a sentence on its own.
    with_period = onnx_llm.new_session().sentence_end_probability(
        "I tell you it is not poison. She cried.")
    with_comma = onnx_llm.new_session().sentence_end_probability(
        "I tell you it is not poison, She cried.")
    assert with_period == pytest.approx(with_comma, abs=1e-4)
    # A long turn is read from its last words: what was said further back does not
    # change whether a sentence may end now.
    tail = ("and that is why, after all these years of asking around, I would still like "
            "to know what the capital of France is.")
    assert len(tail.split()) >= TEXT_SIGNAL_WORDS
    lecture = onnx_llm.new_session().sentence_end_probability(
        "Much of political philosophy develops theories that take no account of where we "
        "actually are. " + tail)
    chat = onnx_llm.new_session().sentence_end_probability("Hello there, " + tail)
    assert chat == pytest.approx(lecture, abs=1e-4) and chat > 0.1
    # The same session then answers a conversation as usual.
    steps, text = reply(session, [SYSTEM, {"role": "user", "content": "What time is it?"}])
    assert text.strip() and steps[-1].finished
    assert onnx_llm.tool_support() is not None  # SmolLM2's template offers no tools


def test_bad_device_and_dtype_are_clear_errors(smollm2_gguf):
    from engine.backends.llm.onnx_genai import load

    with pytest.raises(DeviceError, match="'onnx-genai' runs on cpu, not on cuda:0"):
        load(LoadRequest(str(smollm2_gguf), Device("cuda", 0), "auto", LlmConfig()))
    with pytest.raises(ConfigError, match=r"'llm.dtype' = 'float16'.*choices: auto, int4, int8, fp32"):
        load(LoadRequest(str(smollm2_gguf), CPU, "float16", LlmConfig()))


def test_a_missing_runtime_names_the_pip_command(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxruntime_genai" else real(name, *a))
    spec = BackendRegistry().get("llm", "onnx-genai")
    with pytest.raises(MissingDependencyError, match=r"onnxruntime-genai.*pip install 'parley\[offline\]'"):
        spec.ensure_installed()


def test_the_conversion_is_cached_by_content(onnx_llm, smollm2_conversion):
    from engine.backends.llm.onnx_convert import converted_folder, existing_conversion

    gguf = str(smollm2_conversion.gguf)
    folder = existing_conversion(gguf)
    assert folder is not None and folder == onnx_llm.folder
    assert (folder / "model.onnx").is_file() and (folder / "chat_template.jinja").is_file()
    assert converted_folder(gguf) == folder  # found, not converted again
    assert onnx_llm.name == "SmolLM2-135M-Instruct"


# ---------------------------------------------------------------------- the chat tokenizer
def _with_template(tmp_path: Path, source: Path, template: str | None) -> Path:
    folder = tmp_path / (template or "own")
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "special_tokens_map.json"):
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)
    if template:
        shutil.copy(DATA / template, folder / "chat_template.jinja")
    return folder


@pytest.mark.parametrize("template", [None, "qwen3_nonthinking.jinja", "vllm_llama3.1_json.jinja"])
def test_the_chat_tokenizer_renders_what_transformers_renders(tmp_path, smollm2_conversion, template):
    from transformers import AutoTokenizer

    folder = _with_template(tmp_path, smollm2_conversion.folder, template)
    ours, theirs = ChatTokenizer(folder), AutoTokenizer.from_pretrained(folder)
    tools = [t.as_openai() for t in QWEN_TOOLS] if template else None
    conversation = [SYSTEM, {"role": "user", "content": "Hi there"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "What's the weather in Paris, in °C?"}]
    for prompt in (True, False):
        expected = theirs.apply_chat_template(conversation, tools=tools, add_generation_prompt=prompt,
                                              tokenize=False)
        rendered = ours.apply_chat_template(conversation, tools=tools, add_generation_prompt=prompt)
        assert rendered == expected
        assert ours.encode(rendered) == list(theirs(expected, add_special_tokens=False)["input_ids"])
    assert ours.eos_token_id == theirs.eos_token_id
    assert ours.decode(ours.encode("Paris, °C")) == "Paris, °C"


def test_a_folder_without_tokenizer_is_a_clear_error(tmp_path):
    from engine.errors import ModelError

    with pytest.raises(ModelError, match=r"has no tokenizer\.json"):
        ChatTokenizer(tmp_path)
