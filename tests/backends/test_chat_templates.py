"""The real Qwen2.5, Qwen3 and Llama 3.2 chat templates (resources/chat_templates/) on
every local backend: rendered with tools and thinking off, and the calls those models
write parsed back; a ``<think>`` block never reaches the text, the speaker or the history.

The models are tiny random ones of each family's architecture with its real template and
control tokens (``tests/support/chat_models.py``). A random model writes no call or
reasoning of its own, so the sampler is scripted to "say" a reply; the decoding, the
think filter, the call parser and the steps are the backends' own.
"""

from __future__ import annotations

import itertools
import json

import pytest

from engine.backends.base import GenerationOptions, LoadRequest, ToolSpec
from engine.backends.llm.chat_templates import FAMILY_FILES, family_template, template_path
from engine.backends.llm.text_stream import ThinkFilter, opens_thinking
from engine.backends.llm.tool_calls import HERMES, LLAMA3, one_call_per_message, split_reply, tool_format
from engine.config import LlmConfig
from engine.errors import ConfigError
from engine.runtime.devices import CPU
from tests.support.chat_models import FAMILIES, build_tiny_chat_model
from tests.support.mlx import MLX

BACKENDS = ("transformers", "onnx-genai", "mlx-lm")
QUESTION = [{"role": "system", "content": "You are brief."},
            {"role": "user", "content": "What's the weather in Paris?"}]
WEATHER = ToolSpec("get_weather", "Get the current weather in a city",
                   {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
NOTE = ToolSpec("take_note", "Write a note down",
                {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
TOOLS = GenerationOptions(max_new_tokens=120, tools=(WEATHER, NOTE))
QWEN_THINKING_OFF = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


# ---------------------------------------------------------------------- the models
@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    """A tiny random model of each family, with its real template."""
    return {family: build_tiny_chat_model(tmp_path_factory.mktemp(family), family) for family in FAMILIES}


@pytest.fixture(scope="module")
def models(folders, parley_cache_dir):
    """``get(backend, family)``: the family's tiny model loaded through the backend's own
    ``load`` (onnx-genai converts it once, fp32), each loaded once per module."""
    loaded: dict = {}

    def get(backend: str, family: str):
        if (backend, family) not in loaded:
            folder = str(folders[family])
            if backend == "transformers":
                from engine.backends.llm.transformers_lm import load
                llm = load(LoadRequest(folder, CPU, "auto", LlmConfig()))
            elif backend == "onnx-genai":
                from engine.backends.llm.onnx_genai import load
                llm = load(LoadRequest(folder, CPU, "fp32", LlmConfig()))
            else:
                from engine.backends.llm import mlx_lm
                llm = mlx_lm.load(LoadRequest(folder, MLX, "auto", LlmConfig()))
            loaded[backend, family] = llm
        return loaded[backend, family]

    return get


def prompt_text(llm, messages, options=None) -> str:
    return llm.tokenizer.decode(llm.new_session().prompt_ids(messages, options), skip_special_tokens=False)


def encode(backend: str, llm, text: str) -> list[int]:
    if backend == "mlx-lm":
        return list(llm.tokenizer.encode(text, add_special_tokens=False))
    return llm.encode(text)


def say(backend: str, llm, monkeypatch, text: str, options: GenerationOptions = TOOLS,
        messages=QUESTION) -> list:
    """The steps of a reply in which the model writes ``text`` (then ends its message)."""
    script = itertools.chain(encode(backend, llm, text), itertools.repeat(min(llm.stop_ids)))
    if backend == "mlx-lm":
        import mlx.core as mx
        import mlx_lm.sample_utils

        monkeypatch.setattr(mlx_lm.sample_utils, "make_sampler",
                            lambda *args, **kwargs: lambda logprobs: mx.array([next(script)]))
    else:
        from engine.backends.llm import local_session

        monkeypatch.setattr(local_session, "choose_token", lambda *args, **kwargs: next(script))
    return list(llm.new_session().generate(messages, options, lambda: False))


# ---------------------------------------------------------------------- the files
def test_each_ladder_family_has_its_published_template_with_its_call_format():
    from engine.backends.ladder import load_ladder

    families = {rung.family for rung in load_ladder().rungs_for("llm", "cpu")}
    families |= {rung.family for rung in load_ladder().rungs_for("llm", "cuda")}
    assert families - set(FAMILY_FILES) <= {"smollm2"}  # SmolLM2's own template offers no tools
    assert tool_format(family_template("qwen2.5")) == HERMES
    assert tool_format(family_template("qwen3")) == HERMES
    assert tool_format(family_template("llama3.2")) == LLAMA3
    assert "enable_thinking" in family_template("qwen3")
    sources = (template_path("qwen3").parent / "SOURCES.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in sources for name in FAMILY_FILES.values())
    with pytest.raises(ConfigError, match=r"'gemma3'.*llama3\.2, qwen2\.5, qwen3"):
        template_path("gemma3")


# ---------------------------------------------------------------------- thinking off
@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_qwen3_renders_with_thinking_off_on_every_backend(models, backend):
    llm = models(backend, "qwen3")
    plain = prompt_text(llm, QUESTION)
    assert plain.endswith(QWEN_THINKING_OFF)
    with_tools = prompt_text(llm, QUESTION, TOOLS)
    assert with_tools.endswith(QWEN_THINKING_OFF) and "<tools>" in with_tools
    # The same prompt, token for token, on every backend.
    reference = models("transformers", "qwen3").new_session()
    assert llm.new_session().prompt_ids(QUESTION, TOOLS) == reference.prompt_ids(QUESTION, TOOLS)
    # Templates without the switch render as before.
    for family in ("qwen2.5", "llama3.2"):
        assert "<think>" not in prompt_text(models(backend, family), QUESTION, TOOLS)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_think_block_never_reaches_the_text(models, backend, monkeypatch):
    llm = models(backend, "qwen3")
    reply = "<think>\nThe user asks about Paris. I should be brief.\n</think>\n\nIt is sunny in Paris."
    steps = say(backend, llm, monkeypatch, reply, GenerationOptions(max_new_tokens=120))
    assert "".join(s.text for s in steps) == "It is sunny in Paris."
    assert not any(word in s.text for s in steps for word in ("think", "brief", "user", "<"))
    assert sum(1 for s in steps if s.text) >= 3  # the answer still streams
    # Reasoning before a call: neither is spoken, the call is parsed.
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    steps = say(backend, llm, monkeypatch, "<think>\nA tool fits.\n</think>\n\n" + call)
    assert "".join(s.text for s in steps) == ""
    assert [(c.name, c.arguments) for c in steps[-1].tool_calls] == [("get_weather", '{"city":"Paris"}')]


# ---------------------------------------------------------------------- tools rendered
@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_tools_render_through_the_real_template(models, backend, family):
    llm = models(backend, family)
    assert llm.tool_format == (LLAMA3 if family == "llama3.2" else HERMES) and llm.tool_support() is None
    text = prompt_text(llm, QUESTION, TOOLS)
    if family == "llama3.2":
        assert 'Respond in the format {"name": function name, "parameters": dictionary' in text
        assert json.dumps(WEATHER.as_openai(), indent=4) in text  # tojson(indent=4)
    else:
        assert "<tools>\n" + json.dumps(WEATHER.as_openai()) + "\n" + json.dumps(NOTE.as_openai()) in text
        assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}' in text
    assert text.rstrip().endswith(("<|end_header_id|>", "</think>", "<|im_start|>assistant"))


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_history_with_two_calls_renders(models, backend, family):
    calls = [{"id": f"call_{n}", "type": "function",
              "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}
             for n, city in enumerate(("Paris", "Oslo"))]
    history = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": calls},
               {"role": "tool", "tool_call_id": "call_0", "content": '{"temperature": 21}'},
               {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 4}'}]
    text = prompt_text(models(backend, family), history, TOOLS)
    if family == "llama3.2":  # one call per assistant message, each with its answer
        paris = text.index('{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>')
        first = text.index("ipython<|end_header_id|>\n\n" + json.dumps('{"temperature": 21}'))
        oslo = text.index('{"name": "get_weather", "parameters": {"city": "Oslo"}}<|eot_id|>')
        assert paris < first < oslo < text.index(json.dumps('{"temperature": 4}'))
    else:
        assert ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
                '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>') in text
        assert ('<tool_response>\n{"temperature": 21}\n</tool_response>\n<tool_response>\n'
                '{"temperature": 4}\n</tool_response>') in text


def test_one_call_per_message_pairs_each_call_with_its_answer():
    calls = [{"id": "a", "function": {"name": "f", "arguments": {}}},
             {"id": "b", "function": {"name": "g", "arguments": {}}}]
    messages = [{"role": "user", "content": "Go."},
                {"role": "assistant", "content": "On it.", "tool_calls": calls},
                {"role": "tool", "tool_call_id": "b", "content": "B"},
                {"role": "tool", "tool_call_id": "a", "content": "A"},
                {"role": "tool", "tool_call_id": "zz", "content": "Z"}]
    out = one_call_per_message(messages)
    assert [(m["role"], m.get("content")) for m in out] == [
        ("user", "Go."), ("assistant", "On it."), ("tool", "A"), ("assistant", ""), ("tool", "B"),
        ("tool", "Z")]
    assert [m["tool_calls"][0]["id"] for m in out if m["role"] == "assistant"] == ["a", "b"]
    assert one_call_per_message(messages[:1]) == messages[:1]


# ---------------------------------------------------------------------- calls parsed back
QUOTED = 'He said "hi"\nthen left'
HERMES_CALLS = {
    "one": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            [("get_weather", {"city": "Paris"})]),
    "two": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
            [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})]),
    "quotes and newlines": ('<tool_call>\n{"name": "take_note", "arguments": {"text": '
                            + json.dumps(QUOTED) + '}}\n</tool_call>', [("take_note", {"text": QUOTED})]),
    "a raw newline in a string": ('<tool_call>\n{"name": "take_note", "arguments": '
                                  '{"text": "line one\nline two"}}\n</tool_call>',
                                  [("take_note", {"text": "line one\nline two"})]),
}
LLAMA_CALLS = {
    "one": ('{"name": "get_weather", "parameters": {"city": "Paris"}}', [("get_weather", {"city": "Paris"})]),
    "two": ('{"name": "get_weather", "parameters": {"city": "Paris"}}; '
            '{"name": "get_weather", "parameters": {"city": "Oslo"}}',
            [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})]),
    "quotes and newlines": ('{"name": "take_note", "parameters": {"text": ' + json.dumps(QUOTED) + "}}",
                            [("take_note", {"text": QUOTED})]),
    "python tag": ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
                   [("get_weather", {"city": "Paris"})]),
}
#: Every case on transformers; on the other backends (the same parser after their own
#: decoding) the cases whose tokens differ most: two calls, quotes and newlines, the tag.
CASES = [(backend, family, case, *calls[case]) for backend in BACKENDS for family, calls in
         (("qwen2.5", HERMES_CALLS), ("qwen3", HERMES_CALLS), ("llama3.2", LLAMA_CALLS)) for case in calls
         if backend == "transformers" or case in ("two", "quotes and newlines", "python tag")]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "family", "case", "reply", "expected"), CASES,
                         ids=[f"{b}-{f}-{c}" for b, f, c, *_ in CASES])
def test_the_calls_a_family_writes_are_parsed_back(models, monkeypatch, backend, family, case, reply,
                                                   expected):
    llm = models(backend, family)
    steps = say(backend, llm, monkeypatch, reply)
    assert "".join(s.text for s in steps).strip() == ""  # nothing of a call is spoken
    assert steps[-1].finished and all(s.tool_calls == () for s in steps[:-1])
    assert [(c.name, json.loads(c.arguments)) for c in steps[-1].tool_calls] == expected
    assert len({c.call_id for c in steps[-1].tool_calls}) == len(expected)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_words_before_a_qwen_call_are_spoken_as_they_come(models, monkeypatch, backend):
    words = "Let me check the weather. "
    steps = say(backend, models(backend, "qwen2.5"), monkeypatch, words + HERMES_CALLS["two"][0])
    assert "".join(s.text for s in steps).strip() == words.strip()
    assert sum(1 for s in steps if s.text) >= 3
    assert len(steps[-1].tool_calls) == 2


# ---------------------------------------------------------------------- the think filter
REASONING = "<think>\nOkay, the user wants <b>bold</b>. Hmm.\n</think>\n\nHello there. <thinking is fine."


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 1000])
def test_the_think_filter_drops_reasoning_in_any_pieces(size):
    think = ThinkFilter()
    out = "".join(think.feed(REASONING[i:i + size]) for i in range(0, len(REASONING), size)) + think.finish()
    assert out == "Hello there. <thinking is fine."
    assert think.dropped


def test_the_think_filter_edges():
    think = ThinkFilter()
    assert think.feed("Sure. <thi") == "Sure. "  # could still be a tag
    assert think.feed("nk>secret") == ""
    assert think.finish() == ""  # never closed: reasoning, dropped whole
    opened = ThinkFilter(opened=True)  # the prompt opened the block (a thinking-only template)
    assert opened.feed("reasoning</think>\n\nAnswer.") == "Answer."
    stray = ThinkFilter()
    assert stray.feed("Yes.</think> Right.") == "Yes.Right."  # a stray closing tag is not spoken
    plain = ThinkFilter()
    assert plain.feed("No tags at all <") == "No tags at all " and plain.finish() == "<"
    assert not plain.dropped
    assert opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not opens_thinking(QWEN_THINKING_OFF) and not opens_thinking("assistant\n")


def test_split_reply_is_unchanged_by_the_think_filter_for_plain_calls():
    spoken, calls = split_reply(HERMES_CALLS["one"][0], HERMES, (WEATHER,))
    assert spoken == "" and [c.name for c in calls] == ["get_weather"]


# ---------------------------------------------------------------------- through the LLM stage
@pytest.mark.slow
def test_a_think_block_is_never_shown_spoken_or_kept_through_the_llm_stage(models, monkeypatch):
    """The LLM stage on the tiny Qwen3 (transformers), its sampler made to reason first:
    the reply's text events (display), the TextChunks (what TTS reads) and the history
    hold the answer only, and the next turn's prompt carries no reasoning."""
    from engine.pipeline.chat_history import ItemKind
    from engine.pipeline.events import ReplyText
    from engine.pipeline.messages import TextChunk
    from tests.stages.test_llm_stage_requests import run

    llm = models("transformers", "qwen3")
    answer = "It is sunny in Paris today. Take sunglasses."
    reply = "<think>\nThe user wants the weather. Keep it short.\n</think>\n\n" + answer
    script = itertools.chain(encode("transformers", llm, reply), itertools.repeat(min(llm.stop_ids)))
    from engine.backends.llm import local_session

    monkeypatch.setattr(local_session, "choose_token", lambda *args, **kwargs: next(script))
    out, events, history = run(llm, "What's the weather in Paris?")
    chunks = [m for m in out if isinstance(m, TextChunk)]
    spoken = " ".join(c.text for c in chunks)
    shown = [e.text for e in events if isinstance(e, ReplyText)]
    assert " ".join(spoken.split()) == answer and len([c for c in chunks if c.text]) >= 2
    assert " ".join(" ".join(shown).split()) == answer
    assert [(i.kind, i.text) for i in history.items()] == [
        (ItemKind.USER, "What's the weather in Paris?"), (ItemKind.ASSISTANT, answer)]
    for text in (spoken, *shown, *(i.text for i in history.items())):
        assert "think" not in text and "short" not in text
    next_prompt = prompt_text(llm, history.messages_for("And tomorrow?", "Be brief.", 4, summary=False))
    assert "Keep it short" not in next_prompt and answer in next_prompt
