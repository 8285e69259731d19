"""``parley-cli bench calibration``: the calibration's predictions against full random-weight runs.

For each rung that runs here fully with random weights (the Whisper rungs on CTranslate2
int8, the LLM rungs on onnxruntime-genai int4; CPU), the whole model is built from its
hub config (``engine.bench.random_weights``) and timed with the calibration's own
protocol (``engine.models.kernels``: one STT call at the 10 s and the 30 s window with 24
tokens; a 300-token prompt to its first token, a later turn's 16 new tokens on that
prompt's KV cache to its first token, then decoded tokens per second). The
calibration runs first, in the same process, so both see the same machine load; the
table gives predicted, measured and their ratio per rung. Piper and Kokoro have no
random-weight build here (Piper's predictions are scaled from the bundled voice, which is
measured, not predicted).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from engine.errors import ConfigError
from engine.models import kernels
from engine.models.calibration import (LLM_DECODE_TOKENS, LLM_PROMPT_TOKENS, LLM_TURN_TOKENS,
                                       STT_FALLBACK_FRAMES, STT_TOKENS, STT_WINDOW_FRAMES,
                                       RungCost, calibrate, format_calibration)
from engine.backends.ladder import Ladder, load_ladder

DESCRIPTION = (__doc__ or "").split("\n\n")[0]
PROG = "parley-cli bench calibration"
#: The fields compared, with how the table shows them.
FIELDS = (("stt_s", "STT 10 s"), ("stt_30s_s", "STT 30 s"),
          ("llm_turn_first_token_s", "LLM turn 1st"), ("llm_first_token_s", "LLM 1st turn"),
          ("llm_tokens_per_s", "LLM tok/s"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    parser.add_argument("--rungs", metavar="ID[,ID]",
                        help="the rungs to time (default: every CPU faster-whisper and "
                             "onnx-genai rung of the ladder)")
    parser.add_argument("--random-layers", type=int, metavar="N",
                        help="N layers per stack instead of the real count (for tests)")
    parser.add_argument("--root", metavar="DIR", help="where the random models are built once "
                        "(default ~/.cache/parley/random)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    return parser


def runnable(ladder: Ladder) -> list[str]:
    """The rungs that run here fully with random weights: faster-whisper and onnx-genai on cpu."""
    return [r.id for r in ladder.rungs
            if (build := r.build("cpu")) is not None and build.backend in ("faster-whisper",
                                                                           "onnx-genai")]


def selected(ladder: Ladder, text: str | None) -> list[str]:
    """``--rungs``' ids, checked against what runs here; ConfigError naming a wrong one."""
    allowed = runnable(ladder)
    if not text:
        return allowed
    ids = [part.strip() for part in text.split(",") if part.strip()]
    for rung_id in ids:
        if rung_id not in allowed:
            raise ConfigError(f"--rungs: {rung_id!r} cannot be timed with random weights here; "
                              f"allowed: {', '.join(allowed)}")
    return ids


def measure_rung(ladder: Ladder, rung_id: str, layers: int | None, root: Path | None) -> RungCost:
    """Build the rung's full model with random weights (once) and time it as the
    calibration predicts it."""
    from engine.bench import random_weights as rw
    from engine.runtime.compute_gate import threads_per_call

    rung = ladder.get(rung_id)
    assert rung.hub_config is not None  # runnable() rungs all have one (ladder checks it)
    name = rung.hub_config.parent.name
    threads = threads_per_call()
    if rung.stage == "stt":
        folder = rw.build_random_ct2_whisper(rw.random_folder(name, layers, root, runtime="ct2"),
                                             name, layers)
        enc10, enc30, dec = kernels.time_whisper(folder, frames=(STT_WINDOW_FRAMES,
                                                                 STT_FALLBACK_FRAMES),
                                                 tokens=STT_TOKENS, threads=threads)
        return RungCost(rung_id, "cpu", stt_s=enc10 + dec, stt_30s_s=enc30 + dec)
    from engine.backends.llm.onnx_convert import converted_folder

    source = rw.build_random_causal_lm(rw.random_folder(name, layers, root), name, layers)
    onnx = converted_folder(str(source), "int4",
                            lambda _f, text: print(f"  {text}", file=sys.stderr, flush=True))
    first, step, turn = kernels.time_onnx_genai(onnx, LLM_PROMPT_TOKENS, LLM_DECODE_TOKENS, threads,
                                                turn_tokens=LLM_TURN_TOKENS)
    return RungCost(rung_id, "cpu", llm_first_token_s=first, llm_tokens_per_s=1 / step,
                    llm_turn_first_token_s=turn)


def format_check(rows: list[tuple[RungCost, RungCost]]) -> str:
    """Predicted, measured and measured/predicted per rung and field."""
    lines = [f"{'rung':<24} {'figure':<14} {'predicted':>10} {'measured':>10} {'meas/pred':>9}"]
    for predicted, measured in rows:
        for key, label in FIELDS:
            p, m = getattr(predicted, key), getattr(measured, key)
            if m is None:
                continue

            def show(value: float | None, key: str = key) -> str:
                if value is None:
                    return "-"
                return f"{value:.1f}" if key == "llm_tokens_per_s" else f"{value * 1000:.0f} ms"

            ratio = "-" if not p else f"{m / p:.2f}"
            lines.append(f"{predicted.rung_id:<24} {label:<14} {show(p):>10} {show(m):>10} {ratio:>9}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Calibrate, then time each selected rung fully; print the table (or JSON)."""
    from engine.errors import run_command

    args = build_parser().parse_args(argv)
    return run_command(lambda: _run(args), PROG)


def _run(args: argparse.Namespace) -> int:
    if args.random_layers is not None and args.random_layers < 1:
        raise ConfigError(f"--random-layers must be at least 1; got {args.random_layers}")
    ladder = load_ladder()
    ids = selected(ladder, args.rungs)
    root = Path(args.root).expanduser() if args.root else None
    subset = Ladder(ladder.path, tuple(r for r in ladder.rungs if r.id in ids))
    print(f"{PROG}: calibrating ({len(ids)} rungs)...", file=sys.stderr, flush=True)
    # Not stored: a calibration of some rungs must not replace the one auto reads.
    calibration = calibrate("cpu", ladder=subset, layers=args.random_layers, store=False)
    print(format_calibration(calibration), file=sys.stderr, flush=True)
    rows = []
    for rung_id in ids:
        started = time.perf_counter()
        print(f"{rung_id}: building (once) and timing with random weights...", file=sys.stderr,
              flush=True)
        rows.append((calibration.costs[rung_id], measure_rung(ladder, rung_id, args.random_layers,
                                                              root)))
        print(f"  done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    if args.json:
        json.dump({"calibration_s": calibration.took_s, "machine": calibration.machine,
                   "rungs": [{"rung": p.rung_id, "predicted": {k: getattr(p, k) for k, _ in FIELDS},
                              "measured": {k: getattr(m, k) for k, _ in FIELDS}}
                             for p, m in rows]}, sys.stdout, indent=1)
        print()
    else:
        print(f"calibration took {calibration.took_s:.1f} s on {calibration.machine}"
              + (f" (busy: load average {calibration.load:.1f} as it began)"
                 if calibration.busy and calibration.load is not None else ""))
        print(format_check(rows))
    return 0
