"""Tiny random-weight models of the ladder's instruct families (Qwen2.5, Qwen3, Llama 3.2)
with their real chat templates (``resources/chat_templates/``) and the families' special
tokens, built offline in well under a second each.

The tokenizer is a byte-level BPE trained here on a few sentences (any text encodes; the
real vocabularies are not on PyPI), holding each family's control tokens as the real one
does: Qwen's ``<|im_start|>``/``<|im_end|>`` special and ``<tool_call>``, ``<think>``
plain added tokens; Llama's header, ``<|eot_id|>``, ``<|eom_id|>`` and ``<|python_tag|>``
special. Random weights write gibberish: tests script the sampler to make a model "say"
a given reply, and everything after the sampler (decoding, filtering, parsing) is real.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.backends.llm.chat_templates import family_template


@dataclass(frozen=True)
class Family:
    """What a tiny model of one family needs: its architecture and control tokens."""

    name: str  # the ladder's family
    architecture: str  # transformers config class prefix: Qwen2, Qwen3, Llama
    special: tuple[str, ...]  # special tokens (the first ones: bos/eos as below)
    plain: tuple[str, ...]  # added tokens that are not special (Qwen's tags)
    bos: str | None
    eos: str  # the end of a message
    stops: tuple[str, ...]  # every token that ends a reply


QWEN_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
QWEN_PLAIN = ("<tool_call>", "</tool_call>", "<think>", "</think>")
FAMILIES = {
    "qwen2.5": Family("qwen2.5", "Qwen2", QWEN_SPECIAL, QWEN_PLAIN, None, "<|im_end|>",
                      ("<|im_end|>", "<|endoftext|>")),
    "qwen3": Family("qwen3", "Qwen3", QWEN_SPECIAL, QWEN_PLAIN, None, "<|im_end|>",
                    ("<|im_end|>", "<|endoftext|>")),
    "llama3.2": Family("llama3.2", "Llama",
                       ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                        "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"),
                       (), "<|begin_of_text|>", "<|eot_id|>",
                       ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")),
}

_CORPUS = [
    "What's the weather in Paris? It is sunny and 21 degrees.",
    'Sure, one moment. {"name": "get_weather", "arguments": {"city": "Paris"}}',
    '{"name": "take_note", "parameters": {"text": "He said \\"hi\\"\\nthen left"}}',
    "You are a helpful assistant. Keep answers short. The capital of France is Paris.",
    "Let me think about this question step by step before I answer it.",
]


def build_tiny_chat_model(folder: Path, family: str, seed: int = 0) -> Path:
    """Save a 2-layer (hidden 64) random model of ``family`` with its real chat template."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AddedToken, GenerationConfig, PreTrainedTokenizerFast

    spec = FAMILIES[family]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(_CORPUS, trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=spec.bos, eos_token=spec.eos,
                                        pad_token=spec.eos)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in spec.special],
                         special_tokens=True)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in spec.plain])
    tokenizer.chat_template = family_template(family)
    stops = [tokenizer.convert_tokens_to_ids(t) for t in spec.stops]
    config_class = getattr(transformers, f"{spec.architecture}Config")
    model_class = getattr(transformers, f"{spec.architecture}ForCausalLM")
    config = config_class(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, max_position_embeddings=4096, tie_word_embeddings=True,
                          bos_token_id=tokenizer.bos_token_id, eos_token_id=stops,
                          pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = model_class(config)
    model.generation_config = GenerationConfig(eos_token_id=stops, bos_token_id=tokenizer.bos_token_id)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
