"""Function calls of local models: the strict parser on real recorded outputs
(tests/backends/data/tool_calls/, sources in its README), its errors, the streaming
splitter that keeps call text from being spoken, the template's format, and the
transformers and mlx-lm backends rendering tools and returning calls on the last step.

The backend tests use the tiny random Llama with SmolLM2's tokenizer (conftest), given
Qwen3's published tool template and the marker tokens as special tokens. A random model
writes no call of its own, so the generation tests script the sampler's choices (the
model's forward passes, the decoding, the splitter and the steps are the real ones).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import shutil
from pathlib import Path

import pytest

from engine.backends.base import GenerationOptions, ToolCall, ToolSpec
from engine.backends.llm.tool_calls import (HERMES, LLAMA3, ToolCallError, ToolCallSplitter, choice_hint,
                                            offered_tools, split_reply, template_messages, tool_format)
from engine.errors import ConfigError, ModelError

DATA = Path(__file__).parent / "data" / "tool_calls"
CALL_ID = re.compile(r"call_[0-9a-f]{24}")


def _spec(name, description, **properties):
    return ToolSpec(name, description, {"type": "object", "properties": properties,
                                        "required": list(properties)[:1]})


# The tools of each recorded output, as its source declares them.
QWEN_TOOLS = (
    _spec("get_current_temperature", "Get current temperature at a location.",
          location={"type": "string"}, unit={"type": "string", "enum": ["celsius", "fahrenheit"]}),
    _spec("get_temperature_date", "Get temperature at a location and date.",
          location={"type": "string"}, date={"type": "string"}, unit={"type": "string"}))
LLAMA31_TOOLS = (_spec("trending_songs", "Returns the trending songs on a Music site",
                       n={"type": "object"}, genre={"type": "object"}),)
LLAMA32_TOOLS = (
    _spec("list_files", "List files and directories in a local folder.", path={"type": "string"}),
    _spec("calculator", "Evaluate a mathematical expression.", expression={"type": "string"}))
WEATHER = _spec("get_weather", "Get the current weather in a city", city={"type": "string"})
CLOCK = _spec("get_time", "The local time in a city", city={"type": "string"})


def recorded(name: str, end_of_message: str) -> str:
    """A recorded reply without its end-of-message token (a stop token: no backend passes
    it on as text)."""
    text = (DATA / name).read_text(encoding="utf-8")
    assert text.endswith(end_of_message), name
    return text[:len(text) - len(end_of_message)]


QWEN_REPLY = recorded("qwen2.5-7b-instruct_two_calls.txt", "<|im_end|>")
LLAMA31_REPLY = recorded("llama3.1_json_python_tag.txt", "<|eom_id|>")
LLAMA32_REPLY = recorded("llama3.2-1b-instruct_json.txt", "")


def fed(splitter: ToolCallSplitter, text: str, size: int) -> list[str]:
    """What ``feed`` released for each ``size``-character piece of ``text``."""
    return [splitter.feed(text[i:i + size]) for i in range(0, len(text), size)]


def assert_fresh_ids(calls):
    assert all(CALL_ID.fullmatch(c.call_id) for c in calls)
    assert len({c.call_id for c in calls}) == len(calls)


# ---------------------------------------------------------------------- recorded outputs
@pytest.mark.parametrize("size", [1, 2, 3, 7, 10_000])
def test_qwen25_two_hermes_calls_parse_in_any_pieces(size):
    splitter = ToolCallSplitter(HERMES, QWEN_TOOLS)
    spoken = "".join(fed(splitter, QWEN_REPLY, size))
    rest, calls = splitter.finish()
    assert (spoken + rest).strip() == ""  # only the newline between the two calls
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_current_temperature", {"location": "San Francisco, CA, USA"}),
        ("get_temperature_date", {"location": "San Francisco, CA, USA", "date": "2024-10-01"})]
    assert calls[1].arguments == '{"location":"San Francisco, CA, USA","date":"2024-10-01"}'  # compact
    assert_fresh_ids(calls)


@pytest.mark.parametrize("size", [1, 4, 10_000])
def test_llama31_json_call_after_python_tag_parses(size):
    splitter = ToolCallSplitter(LLAMA3, LLAMA31_TOOLS)
    assert "".join(fed(splitter, LLAMA31_REPLY, size)) == ""
    rest, calls = splitter.finish()
    assert rest == "" and len(calls) == 1
    assert (calls[0].name, calls[0].arguments) == ("trending_songs", '{"n":"10","genre":"all"}')
    assert_fresh_ids(calls)


def test_llama32_bare_json_call_parses():
    spoken, calls = split_reply(LLAMA32_REPLY, LLAMA3, LLAMA32_TOOLS)
    assert spoken == ""
    assert [(c.name, c.arguments) for c in calls] == [("list_files", '{"path":"/tmp"}')]


def test_every_call_gets_a_new_id():
    ids = {c.call_id for _ in range(20) for c in split_reply(QWEN_REPLY, HERMES, QWEN_TOOLS)[1]}
    assert len(ids) == 40


# ---------------------------------------------------------------------- nothing of a call is spoken
@pytest.mark.parametrize(("fmt", "call", "tools"), [(HERMES, QWEN_REPLY, QWEN_TOOLS),
                                                    (LLAMA3, LLAMA31_REPLY, LLAMA31_TOOLS)])
def test_text_before_a_call_is_spoken_and_the_call_never_is(fmt, call, tools):
    words = "Let me look that up for you. "
    splitter = ToolCallSplitter(fmt, tools)
    released = fed(splitter, words + call, 1)
    rest, calls = splitter.finish()
    spoken = "".join(released) + rest
    assert spoken.strip() == words.strip()
    assert not any(mark in spoken for mark in ("<", "{", '"', "name", "tool"))
    assert len(calls) == len(tools)
    # The words were released as they came, not held until the end.
    assert "".join(released[:len(words)]) == words


def test_a_partial_tag_is_held_only_while_it_can_still_be_a_tag():
    splitter = ToolCallSplitter(HERMES, QWEN_TOOLS)
    assert splitter.feed("Sure. <tool_c") == "Sure. "
    assert splitter.feed("at") == "<tool_cat"  # no tag starts like that: it is text
    assert splitter.feed(" and 3 <") == " and 3 "
    assert splitter.finish() == ("<", ())  # the reply ended: a held "<" is text after all


def test_llama3_reply_that_starts_with_a_brace_waits_for_the_end():
    splitter = ToolCallSplitter(LLAMA3, LLAMA32_TOOLS)
    assert fed(splitter, "  " + LLAMA32_REPLY, 3) == [""] * 19
    assert splitter.finish()[1][0].name == "list_files"
    plain = ToolCallSplitter(LLAMA3, LLAMA32_TOOLS)
    assert plain.feed(" <|py") == ""  # could still be <|python_tag|>
    assert plain.feed("thon is a language") == " <|python is a language"
    assert plain.finish() == ("", ())


# ---------------------------------------------------------------------- malformed calls
TEMPERATURE = '{"name": "get_current_temperature", "arguments": {"location": "Paris"}'
MALFORMED = [
    (HERMES, f"<tool_call>\n{TEMPERATURE}\n</tool_call>", "not valid JSON"),  # one } short
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "'get_weather' is not an offered tool; offered: get_current_temperature, get_temperature_date"),
    (HERMES, '<tool_call>\n{"name": "get_current_temperature", "arguments": "Paris"}\n</tool_call>',
     "'arguments' must be a JSON object, not a string"),
    (HERMES, f"<tool_call>\n{TEMPERATURE}}}", "<tool_call> is never closed by </tool_call>"),
    (HERMES, 'It is sunny.</tool_call>', "</tool_call> without a <tool_call> before it"),
    (HERMES, '<tool_call>{"arguments": {}}</tool_call>', "the call names no function"),
    (HERMES, '<tool_call>{"name": "get_current_temperature", "arguments": {}} {"name": "x"}</tool_call>',
     "must hold exactly one JSON object, not 2"),
    (HERMES, '<tool_call>{"name": "get_current_temperature", "parameters": {}}</tool_call>',
     "unexpected key 'parameters'"),
    # Llama 3.1's built-in tool call (the same model card): not a JSON call.
    (LLAMA3, '<|python_tag|>brave_search.call(query="latest price of 1oz gold")', "not valid JSON"),
    (LLAMA3, '{"name": "trending_songs", "arguments": {"n": 3}}', "unexpected key 'arguments'"),
    (LLAMA3, '{"name": "trending_songs", "parameters": [3]}',
     "'parameters' must be a JSON object, not an array"),
    (LLAMA3, 'Here you go. <|python_tag|>  ', "nothing follows <|python_tag|>"),
    (LLAMA3, '{"name": "trending_songs", "parameters": {}} Enjoy!', "not valid JSON"),
    (HERMES, '<tool_call>["get_current_temperature"]</tool_call>',
     "a call must be a JSON object, not an array"),
]


@pytest.mark.parametrize(("fmt", "reply", "reason"), MALFORMED)
def test_a_malformed_call_is_a_clear_error_quoting_it(fmt, reply, reason):
    tools = QWEN_TOOLS if fmt == HERMES else LLAMA31_TOOLS
    with pytest.raises(ToolCallError) as info:
        split_reply(reply, fmt, tools)
    error = info.value
    assert isinstance(error, ModelError)
    assert reason in error.reason and reason in str(error)
    assert error.excerpt and repr(error.excerpt) in str(error) and error.excerpt in reply.strip()


def test_the_excerpt_of_a_long_call_is_short():
    reply = '<tool_call>{"name": "nope", "arguments": {"text": "' + "x" * 500 + '"}}</tool_call>'
    with pytest.raises(ToolCallError) as info:
        split_reply(reply, HERMES, QWEN_TOOLS)
    assert len(info.value.excerpt) == 120 and info.value.excerpt.endswith("…")
    assert len(str(info.value)) < 300


# ---------------------------------------------------------------------- the template's format
def test_the_format_comes_from_the_chat_template(smollm2_conversion):
    qwen3 = (DATA / "qwen3_nonthinking.jinja").read_text(encoding="utf-8")
    llama = (DATA / "vllm_llama3.1_json.jinja").read_text(encoding="utf-8")
    smollm2 = (smollm2_conversion.folder / "chat_template.jinja").read_text(encoding="utf-8")
    assert tool_format(qwen3) == HERMES
    assert tool_format(llama) == LLAMA3
    assert tool_format(smollm2) is None and tool_format(None) is None
    # Several named templates: the one transformers renders tools with.
    assert tool_format({"default": smollm2, "tool_use": qwen3}) == HERMES
    assert tool_format([{"name": "default", "template": smollm2}]) is None
    # Qwen3-Coder's XML arguments are not the JSON this parser reads.
    assert tool_format("{% if tools %}<tool_call>\n<function={{ name }}>{% endif %}") is None


# ---------------------------------------------------------------------- one reply's tools
def test_tool_choice_decides_what_is_offered_and_what_is_asked():
    both = (WEATHER, CLOCK)
    assert offered_tools(GenerationOptions(tools=both)) == both
    assert offered_tools(GenerationOptions(tools=both, tool_choice="none")) == ()
    assert offered_tools(GenerationOptions(tools=both, tool_choice="get_time")) == (CLOCK,)
    assert choice_hint(GenerationOptions(tools=both)) is None
    assert "get_time" in choice_hint(GenerationOptions(tools=both, tool_choice="get_time"))
    assert "call" in choice_hint(GenerationOptions(tools=both, tool_choice="required"))
    assert choice_hint(GenerationOptions(tool_choice="required")) is None  # nothing offered
    with pytest.raises(ConfigError, match="offered: get_weather, get_time") as info:
        offered_tools(GenerationOptions(tools=both, tool_choice="get_date"))
    assert "'get_date'" in str(info.value)


def test_messages_are_converted_for_templates():
    plain = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}]
    call = {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]}
    answer = {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'}
    converted = template_messages([*plain, call, answer], hint="Call now.")
    assert converted[0] is plain[0] and converted[1] is plain[1]  # plain messages untouched
    assert converted[2]["content"] == ""
    function = converted[2]["tool_calls"][0]["function"]
    assert function == {"name": "get_weather", "arguments": {"city": "Paris"}}
    assert call["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris"}'  # the input is kept
    assert converted[3] == {**answer, "name": "get_weather"}
    assert converted[4] == {"role": "system", "content": "Call now."}
    bad = {**call, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{city"}}]}
    with pytest.raises(ModelError, match="not JSON"):
        template_messages([bad])


# ---------------------------------------------------------------------- transformers
QUESTION = [{"role": "system", "content": "You are brief."},
            {"role": "user", "content": "What's the weather in Paris?"}]
HERMES_REPLY = ('Sure, one moment.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
                "\n</tool_call>")




def scripted(monkeypatch, token_ids):
    """Make the local backends' sampler choose ``token_ids`` in turn (then end of message)."""
    from engine.backends.llm import local_session

    script = itertools.chain(token_ids, itertools.repeat(2))  # 2: <|im_end|>
    monkeypatch.setattr(local_session, "choose_token", lambda *args, **kwargs: next(script))


def ids_of(tokenizer, text):
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def prompt_text(session, messages, options=None):
    return session.llm.tokenizer.decode(session.prompt_ids(messages, options))


@pytest.mark.slow
def test_transformers_reads_the_template_format_and_the_reason(hermes_lm, tiny_lm, smollm2_conversion):
    from engine.backends.llm.transformers_lm import TransformersLlm

    assert hermes_lm.tool_format == HERMES and hermes_lm.tool_support() is None
    # SmolLM2's own template offers no tools; the reason names the model.
    smollm2 = TransformersLlm(tiny_lm.model, tiny_lm.tokenizer, smollm2_conversion.folder)
    reason = smollm2.tool_support()
    assert reason == ("the chat template of SmolLM2-135M-Instruct offers no tools; models that can: "
                      "Qwen2.5-Instruct, Qwen3 or Llama 3.x instruct models, or a remote "
                      "OpenAI-compatible LLM that supports tools (llm.backend openai)")
    with pytest.raises(ModelError, match="offers no tools"):
        list(smollm2.new_session().generate(QUESTION, GenerationOptions(tools=(WEATHER,)), lambda: False))
    # Without tools it answers as always.
    assert list(smollm2.new_session().generate(QUESTION, GenerationOptions(max_new_tokens=2), lambda: False))


@pytest.mark.slow
def test_transformers_prompt_with_tools_holds_their_schemas(hermes_lm):
    session = hermes_lm.new_session()
    tok = hermes_lm.tokenizer
    plain = ids_of(tok, tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False))
    assert session.prompt_ids(QUESTION) == plain  # no tools: the prompt it always had
    assert session.prompt_ids(QUESTION, GenerationOptions(tools=(WEATHER,), tool_choice="none")) == plain
    text = prompt_text(session, QUESTION, GenerationOptions(tools=(WEATHER, CLOCK)))
    assert json.dumps(WEATHER.as_openai()) in text and json.dumps(CLOCK.as_openai()) in text
    assert choice_hint(GenerationOptions(tools=(WEATHER,), tool_choice="required")) in prompt_text(
        session, QUESTION, GenerationOptions(tools=(WEATHER, CLOCK), tool_choice="required"))
    named = prompt_text(session, QUESTION, GenerationOptions(tools=(WEATHER, CLOCK), tool_choice="get_time"))
    assert json.dumps(CLOCK.as_openai()) in named and '"get_weather"' not in named
    assert named.index("do not reply in words") < named.rindex("<|im_start|>assistant")


@pytest.mark.slow
def test_transformers_history_with_calls_renders_through_the_template(hermes_lm):
    history = [*QUESTION,
               {"role": "assistant", "content": None, "tool_calls": [{
                   "id": "call_1", "type": "function",
                   "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'}]
    text = prompt_text(hermes_lm.new_session(), history, GenerationOptions(tools=(WEATHER,)))
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert '<tool_response>\n{"temperature": 21}\n</tool_response>' in text


@pytest.mark.slow
def test_transformers_streams_words_and_puts_the_call_on_the_last_step(hermes_lm, monkeypatch):

    tok = hermes_lm.tokenizer
    reply = ids_of(tok, HERMES_REPLY)
    assert tok.convert_tokens_to_ids("<tool_call>") in reply
    assert "<tool_call>" not in tok.decode(reply, skip_special_tokens=True)  # the hazard
    scripted(monkeypatch, reply)
    steps = list(hermes_lm.new_session().generate(
        QUESTION, GenerationOptions(max_new_tokens=80, tools=(WEATHER, CLOCK)), lambda: False))
    assert "".join(s.text for s in steps) == "Sure, one moment.\n"
    assert sum(1 for s in steps if s.text) >= 4  # the words streamed
    assert not any(mark in s.text for s in steps for mark in ("{", "<", "Paris", "get_weather"))
    assert [s.finished for s in steps] == [False] * (len(steps) - 1) + [True]
    assert all(s.tool_calls == () for s in steps[:-1])
    (call,) = steps[-1].tool_calls
    assert (call.name, call.arguments) == ("get_weather", '{"city":"Paris"}')
    assert CALL_ID.fullmatch(call.call_id)
    assert steps[-1].tokens == len(reply)


@pytest.mark.slow
def test_transformers_tool_reply_still_stops_within_one_token(hermes_lm, monkeypatch):

    scripted(monkeypatch, ids_of(hermes_lm.tokenizer, HERMES_REPLY))
    steps = []
    options = GenerationOptions(max_new_tokens=80, tools=(WEATHER,))
    for step in hermes_lm.new_session().generate(QUESTION, options, lambda: len(steps) >= 3):
        steps.append(step)
    assert len(steps) == 3 and not any(s.finished or s.tool_calls for s in steps)


@pytest.mark.slow
def test_transformers_malformed_call_is_an_error_not_speech(hermes_lm, monkeypatch):

    bad = '<tool_call>\n{"name": "get_weather", "arguments": "Paris"}\n</tool_call>'
    scripted(monkeypatch, ids_of(hermes_lm.tokenizer, bad))
    spoken = []
    with pytest.raises(ToolCallError, match="'arguments' must be a JSON object"):
        for step in hermes_lm.new_session().generate(
                QUESTION, GenerationOptions(max_new_tokens=80, tools=(WEATHER,)), lambda: False):
            spoken.append(step.text)
    assert "".join(spoken) == ""


@pytest.mark.slow
def test_transformers_llama3_template_and_python_tag(hermes_lm, monkeypatch):
    from engine.backends.llm.transformers_lm import TransformersLlm

    tokenizer = copy.deepcopy(hermes_lm.tokenizer)
    tokenizer.chat_template = (DATA / "vllm_llama3.1_json.jinja").read_text(encoding="utf-8")
    llama = TransformersLlm(hermes_lm.model, tokenizer, hermes_lm.folder)
    assert llama.tool_format == LLAMA3 and llama.tool_support() is None
    text = prompt_text(llama.new_session(), QUESTION, GenerationOptions(tools=(WEATHER,)))
    assert '"parameters": dictionary of argument name' in text and '"name": "get_weather"' in text
    call = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'
    scripted(monkeypatch, ids_of(tokenizer, call))
    options = GenerationOptions(max_new_tokens=40, tools=(WEATHER,))
    steps = list(llama.new_session().generate(QUESTION, options, lambda: False))
    assert "".join(s.text for s in steps) == ""
    assert [(c.name, c.arguments) for c in steps[-1].tool_calls] == [("get_weather", '{"city":"Paris"}')]


# ---------------------------------------------------------------------- mlx-lm
@pytest.mark.slow
def test_mlx_reason_and_a_scripted_hermes_call(mlx_llm, mlx_lock_traced, tmp_path, monkeypatch):
    import mlx.core as mx
    import mlx_lm.sample_utils
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    from engine.backends.llm.mlx_lm import MlxLm

    assert mlx_llm.tool_format is None
    assert mlx_llm.tool_support().startswith("the chat template of SmolLM2-135M-Instruct offers no tools")
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(mlx_llm.folder / name, tmp_path / name)
    shutil.copy(DATA / "qwen3_nonthinking.jinja", tmp_path / "chat_template.jinja")
    tokenizer = load_tokenizer(tmp_path)
    llm = MlxLm(mlx_llm.model, tokenizer, tmp_path, mlx_lock_traced, mlx_llm.compute_device,
                mlx_llm.context_tokens)
    assert llm.tool_format == HERMES and llm.tool_support() is None
    session = llm.new_session()
    assert json.dumps(WEATHER.as_openai()) in tokenizer.decode(
        session.prompt_ids(QUESTION, GenerationOptions(tools=(WEATHER,))))
    reply = tokenizer.encode(HERMES_REPLY, add_special_tokens=False)
    script = itertools.chain(reply, itertools.repeat(tokenizer.eos_token_id))
    monkeypatch.setattr(mlx_lm.sample_utils, "make_sampler",
                        lambda *args, **kwargs: lambda logprobs: mx.array([next(script)]))
    steps = list(session.generate(QUESTION, GenerationOptions(max_new_tokens=80, tools=(WEATHER,)),
                                  lambda: False))
    assert "".join(s.text for s in steps) == "Sure, one moment.\n"
    assert not any("{" in s.text or "<" in s.text for s in steps)
    assert steps[-1].finished and [(c.name, c.arguments) for c in steps[-1].tool_calls] == [
        ("get_weather", '{"city":"Paris"}')]
    assert isinstance(steps[-1].tool_calls[0], ToolCall)
