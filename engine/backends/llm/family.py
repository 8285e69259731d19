"""Which anti-repetition defaults a local model gets: by its family and size, not one
tuning for every model.

The repetition penalty (1.3) and the 4-gram ban were tuned on the bundled SmolLM2-135M,
which loops without them ("I'm glad to hear that. I'm glad to hear ..."). An instruct
model of a few hundred million parameters or more does not need them, and its authors
ship their own in ``generation_config.json`` (Qwen2.5: a 1.05 penalty; Qwen3, Llama 3.2,
SmolLM2-360M: none). Every model stays greedy (``llm.temperature`` 0) unless the user
says otherwise; only these two settings depend on the model, and only while they are at
their defaults (``GenerationOptions.from_config``): any other value is the user's and wins.

How a model's family and size are found (``family_defaults``, once per model folder):

1. The model ladder (``resources/ladder.toml``): a rung whose hub id, or the repo of one
   of its builds, is the model's id (a hub snapshot's ``org/name``, or the source a
   conversion recorded in ``parley_source.json``) gives the family and parameter count.
2. Otherwise its config: the parameters estimated from ``config.json`` (or an ONNX
   conversion's ``genai_config.json``): layers x (attention + MLP) + embeddings.

A model under ``SMALL_PARAMETERS`` gets the small-model settings; any other model its
``generation_config.json``'s ``repetition_penalty`` and ``no_repeat_ngram_size`` (absent:
none). No hub request, no heavy import: file reads only.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from engine.backends.llm.conversion_cache import SOURCE_FILE
from engine.backends.llm.sampling import PenaltyDefaults
from engine.errors import ModelError

#: Models below this size get the small-model anti-repetition settings. SmolLM2-135M is
#: 134.5M by the estimate; the smallest instruct models of the ladder are 362M
#: (SmolLM2-360M) and 494M (Qwen2.5-0.5B).
SMALL_PARAMETERS = 250_000_000
#: The bundled SmolLM2-135M's settings (``LlmConfig``'s defaults).
SMALL_MODEL = PenaltyDefaults(repetition_penalty=1.3, no_repeat_ngram_size=4)

_QUANT_SUFFIX = re.compile(r"[.-](?:I?Q\d\w*|F16|F32|BF16)$", re.IGNORECASE)


@functools.lru_cache(maxsize=16)
def family_defaults(folder: Path) -> PenaltyDefaults:
    """The anti-repetition defaults of the model in ``folder``, with why (``why``)."""
    rung = ladder_rung(folder)
    if rung is not None:
        family, parameters, source = rung.family, rung.parameters, f"ladder rung {rung.id}"
    else:
        family, parameters, source = _config_family(folder), estimated_parameters(folder), "its config"
    size = f"{parameters / 1e6:.0f}M parameters" if parameters is not None else "size unknown"
    if parameters is not None and parameters < SMALL_PARAMETERS:
        return PenaltyDefaults(SMALL_MODEL.repetition_penalty, SMALL_MODEL.no_repeat_ngram_size,
                               f"{family}, {size} ({source}): a small model, given the "
                               "anti-repetition settings tuned on SmolLM2-135M")
    own = _generation_config(folder)
    penalty = _number(own, "repetition_penalty", folder, 1.0)
    ngram = int(_number(own, "no_repeat_ngram_size", folder, 0))
    return PenaltyDefaults(penalty, ngram, f"{family}, {size} ({source}): an instruct model, "
                                           "given its generation_config.json's settings")


def model_ids(folder: Path) -> list[str]:
    """The names the model in ``folder`` goes by, most specific first: a hub snapshot's
    ``org/name``, the source a conversion recorded, the folder's own name."""
    ids: list[str] = []
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        ids.append(folder.parent.parent.name.removeprefix("models--").replace("--", "/"))
    try:
        source = json.loads((folder / SOURCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        source = {}
    if isinstance(source, dict):
        ids += [str(source[key]) for key in ("source", "gguf") if source.get(key)]
    ids.append(folder.name)
    return ids


def ladder_rung(folder: Path):
    """The ladder's LLM rung of the model in ``folder``, or None. A hub id matches a rung's
    hub id or a build's repo; a path or folder name matches by its last part (a .gguf's
    quantisation suffix dropped), ignoring case."""
    rungs = _llm_rungs()
    for name in model_ids(folder):
        wanted = name.lower()
        short = _QUANT_SUFFIX.sub("", Path(name).name.removesuffix(".gguf")).lower()
        for rung in rungs:
            repos = [rung.hub_id, *(b.repo for b in rung.builds)]
            if any(repo.lower() == wanted or repo.rpartition("/")[2].lower() == short
                   for repo in repos):
                return rung
    return None


@functools.lru_cache(maxsize=1)
def _llm_rungs() -> tuple:
    from engine.backends.ladder import load_ladder

    return tuple(r for r in load_ladder().rungs if r.stage == "llm")


def estimated_parameters(folder: Path) -> int | None:
    """The model's parameters estimated from its architecture config; None without one."""
    config = _architecture(folder)
    if config is None:
        return None
    try:
        hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
        vocab = int(config["vocab_size"])
        heads = int(config.get("num_attention_heads") or 1)
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or config.get("head_size") or hidden // heads)
        # Absent (an ONNX conversion's config): Llama's SwiGLU size, which SmolLM2 uses.
        mlp_width = int(config.get("intermediate_size") or hidden * 8 // 3)
    except (KeyError, TypeError, ValueError):
        return None
    attention = hidden * head_dim * 2 * (heads + kv_heads)
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
    return layers * (attention + 3 * hidden * mlp_width) + embeddings


def _architecture(folder: Path) -> dict[str, Any] | None:
    config = _json(folder / "config.json")
    if config is not None:
        return config.get("text_config") or config  # a multimodal model's language part
    genai = _json(folder / "genai_config.json")
    model = (genai or {}).get("model")
    if not isinstance(model, dict) or not isinstance(model.get("decoder"), dict):
        return None
    return {**model["decoder"], "vocab_size": model.get("vocab_size")}


def _config_family(folder: Path) -> str:
    config = _json(folder / "config.json") or {}
    genai = ((_json(folder / "genai_config.json") or {}).get("model") or {})
    return str(config.get("model_type") or genai.get("type") or "unknown family")


def _generation_config(folder: Path) -> dict[str, Any]:
    return _json(folder / "generation_config.json") or {}


def _number(config: dict[str, Any], key: str, folder: Path, default: float) -> float:
    value = config.get(key)
    if value is None:
        return default
    lowest = 0 if key == "no_repeat_ngram_size" else 1e-9
    if isinstance(value, bool) or not isinstance(value, int | float) or value < lowest:
        allowed = "an integer, 0 or more" if lowest == 0 else "a number above 0"
        raise ModelError(f"{folder / 'generation_config.json'}: '{key}' = {value!r} is not "
                         f"a valid setting ({allowed})")
    return float(value)


def _json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path}: {exc}") from None
    return value if isinstance(value, dict) else None
