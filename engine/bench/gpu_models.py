"""The hub defaults of a device, built with random weights for ``make gpu-check``.

``engine.bench.random_weights`` builds Whisper large-v3-turbo and SmolLM2-360M (here also
converted for CTranslate2, ``build_ct2_whisper``: faster-whisper is the default STT); the GPU
check needs what ``auto`` would load on the device checked: the transformers LLM's hub
default for that device kind (``Qwen/Qwen3-4B-Instruct-2507`` on CUDA, SmolLM2-360M on a
CPU, as ``engine/backends/__init__.py`` declares them) and Kokoro-82M. Each is built from
its published config in ``resources/hub_configs/NAME/`` (NAME: the hub id's last part,
lower case), so nothing is downloaded. The words are MEANINGLESS; only sizes and timings
count.

The LLM keeps its real vocabulary, but the bundled SmolLM2 tokenizer knows only its first
49152 ids: the output rows past it are zeroed, so their logits are exactly 0 while the
real rows' best is far above (greedy and top-k never pick them), and every reply token
decodes to text. ``layers`` shrinks every stack (tests); all widths stay real. On CUDA
the weights are drawn on the device (seconds for 4B parameters, where a CPU takes
minutes), then saved; the memory is given back before anything is measured.
"""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from pathlib import Path

from engine.bench.random_weights import (CONFIGS, WHISPER, build_random_causal_lm, build_random_whisper,
                                        hub_config, is_built, mark_built)
from engine.errors import ModelError

KOKORO = "kokoro-82m"
KOKORO_VOICE = "af_heart"
# Duration head: sigmoid(b) * max_dur = 4.2 frames per phoneme at speed 1 (4 after
# rounding, 100 ms of audio: close to real speech) instead of a random duration.
_FRAMES_PER_PHONEME = 4.2


def config_name(hub_id: str) -> str:
    """``Qwen/Qwen3-4B-Instruct-2507`` -> ``qwen3-4b-instruct-2507`` (its folder here)."""
    return hub_id.rstrip("/").split("/")[-1].split(":")[0].lower()


def llm_hub_default(device_kind: str) -> str:
    """The transformers LLM backend's hub default on ``device_kind`` (cuda, cpu)."""
    from engine.backends import BackendRegistry

    hub_id = BackendRegistry().get("llm", "transformers").hub_model(device_kind)
    if hub_id is None:
        raise ModelError(f"the transformers LLM backend declares no hub default for {device_kind}")
    return hub_id


def require_config(hub_id: str) -> str:
    """The config folder name of ``hub_id``; a ModelError saying what to add if missing."""
    name = config_name(hub_id)
    if not (CONFIGS / name / "config.json").is_file():
        raise ModelError(f"no config for {hub_id} in {CONFIGS}: add its config.json from the "
                         f"hub as {CONFIGS / name / 'config.json'}")
    return name


def _drawn_on(device: str):
    """Draw the weights on ``device``'s torch device (CUDA: much faster than the CPU)."""
    import torch

    return torch.device(device) if device.startswith("cuda") else nullcontext()


def release(device: str) -> None:
    """Collect what was freed and, on CUDA, give its cached memory back."""
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def build_whisper(folder: Path, layers: int | None, device: str = "cpu") -> Path:
    """Whisper large-v3-turbo (``engine.bench.random_weights``), drawn on ``device``."""
    with _drawn_on(device):
        build_random_whisper(folder, layers)
    release(device)
    return folder


def build_llm(folder: Path, name: str, layers: int | None, device: str = "cpu",
              seed: int = 0) -> Path:
    """The causal LM of ``resources/hub_configs/NAME`` with the bundled SmolLM2 tokenizer
    and chat template, saved in bfloat16 (the dtype ``auto`` loads on a GPU); on CUDA the
    weights are drawn on the GPU and its memory given back afterwards."""
    built = build_random_causal_lm(folder, name, layers, seed, dtype="bfloat16",
                                   drawn_on=_drawn_on(device))
    release(device)
    return built


#: The CTranslate2 compute type ``auto`` gives faster-whisper per device kind.
CT2_COMPUTE = {"cuda": "float16", "cpu": "int8"}


def build_ct2_whisper(source: Path, layers: int | None = None) -> Path:
    """The random Whisper in ``source`` converted for CTranslate2 (what faster-whisper, the
    default STT on CUDA and on a CPU, loads), in ``source``'s sibling ``NAME-ct2``, once.
    Stored in float16; the backend picks the compute type when it loads."""
    target = source.with_name(f"{source.name}-ct2")
    if is_built(target):
        return target
    import ctranslate2

    converter = ctranslate2.converters.TransformersConverter(str(source), copy_files=["tokenizer.json"])
    converter.convert(str(target), quantization="float16", force=True)
    # faster-whisper reads the mel bins (128 for large-v3) from preprocessor_config.json;
    # transformers 5 saves the feature extractor inside processor_config.json instead.
    features = source / "preprocessor_config.json"
    if features.is_file():
        values = json.loads(features.read_text(encoding="utf-8"))
    else:
        processor = json.loads((source / "processor_config.json").read_text(encoding="utf-8"))
        values = processor["feature_extractor"]
    (target / "preprocessor_config.json").write_text(json.dumps(values, indent=2), encoding="utf-8")
    mark_built(target, f"{WHISPER}-ct2", layers)
    return target


def kokoro_values(layers: int | None = None) -> dict:
    """Kokoro-82M's published config (``layers``: PL-BERT and prosody layers, for tests)."""
    values = {k: v for k, v in hub_config(KOKORO).items() if not k.startswith("_")}
    if layers is not None:
        values["n_layer"] = layers
        values["plbert"] = {**values["plbert"], "num_hidden_layers": layers}
    return values


def build_kokoro(folder: Path, layers: int | None, seed: int = 0) -> Path:
    """A Kokoro folder as the kokoro backend reads it: config.json, model.pth (a state
    dict per submodule, as in kokoro-v1_0.pth) and voices/af_heart.pt, all random
    (82M parameters: drawn on the CPU in a second)."""
    if is_built(folder):
        return folder
    import torch
    from kokoro import KModel

    values = kokoro_values(layers)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(values, ensure_ascii=False), "utf-8")
    empty = folder / "empty.pth"
    torch.save({}, empty)  # KModel loads nothing from it: the weights stay random
    torch.manual_seed(seed)
    model = KModel(repo_id="parley/random-kokoro", config=values, model=str(empty))
    empty.unlink()
    head = model.predictor.duration_proj.linear_layer
    share = _FRAMES_PER_PHONEME / values["max_dur"]
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(math.log(share / (1 - share)))
    parts = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
    torch.save({part: getattr(model, part).state_dict() for part in parts}, folder / "model.pth")
    (folder / "voices").mkdir(exist_ok=True)
    torch.save(torch.randn(510, 1, 2 * values["style_dim"]) * 0.15,
               folder / "voices" / f"{KOKORO_VOICE}.pt")
    mark_built(folder, KOKORO, layers)
    return folder


def stack_names(device_kind: str) -> dict[str, str]:
    """Stage -> hub id of what the check builds for ``device_kind``."""
    return {"stt": f"openai/{WHISPER}", "llm": llm_hub_default(device_kind),
            "tts": "hexgrad/Kokoro-82M"}


def check_stack(device_kind: str) -> dict[str, str]:
    """Stage -> config folder name, every config present (before anything is built)."""
    return {stage: require_config(hub_id) for stage, hub_id in stack_names(device_kind).items()}


def stack_folders(root: Path, device_kind: str, layers: int | None = None) -> dict[str, Path]:
    """Stage -> the folder its random model is (or will be) built in under ``root``."""
    suffix = "" if layers is None else f"-{layers}layers"
    return {stage: root / f"{name}{suffix}" for stage, name in check_stack(device_kind).items()}


def stack_overrides(folders: dict[str, Path]) -> dict[str, str]:
    """The settings that place the random models: transformers Whisper, the transformers
    LLM and Kokoro, each from its folder."""
    return {"stt.backend": "transformers-whisper", "stt.model": str(folders["stt"]),
            "llm.backend": "transformers", "llm.model": str(folders["llm"]),
            "tts.backend": "kokoro", "tts.model": str(folders["tts"]), "tts.voice": KOKORO_VOICE}


def build_stack(folders: dict[str, Path], device: str, layers: int | None = None) -> dict[str, float]:
    """Build (once: a folder already built is reused) the random STT, LLM and TTS into
    ``folders``, drawn on ``device`` where that is faster; seconds per stage."""
    import time

    names = check_stack(device.partition(":")[0])
    builders = {"stt": lambda: build_whisper(folders["stt"], layers, device),
                "llm": lambda: build_llm(folders["llm"], names["llm"], layers, device),
                "tts": lambda: build_kokoro(folders["tts"], layers)}
    seconds = {}
    for stage, build in builders.items():
        started = time.perf_counter()
        build()
        seconds[stage] = round(time.perf_counter() - started, 3)
    return seconds
