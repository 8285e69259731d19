"""Turn records and bench runs as JSON-ready dicts and as text for the terminal."""

from __future__ import annotations

from engine.metrics import TurnRecord, percentile
from engine.placement import Placement


def turn_dict(record: TurnRecord) -> dict:
    """A turn as JSON: texts, timeline (seconds after the end of speech), figures."""
    return {
        "turn_id": record.turn_id,
        "transcript": record.transcript,
        "reply": record.reply,
        "cancelled": record.cancelled,
        "timeline": record.timeline(),
        "voice_to_voice_s": _r(record.voice_to_voice),
        "silence_wait_s": _r(record.silence_wait),
        "stt_compute_s": _r(record.stt_compute_s),
        "llm_first_chunk_compute_s": _r(record.llm_first_chunk_compute_s),
        "tts_first_compute_s": _r(record.tts_first_compute_s),
        "engine_overhead_s": _r(engine_overhead(record)),
        "llm_tokens": record.llm_tokens,
        "llm_prompt_tokens": record.llm_prompt_tokens,
        "llm_tokens_per_s": _r(record.llm_tokens_per_s, 2),
        "stt_rtf": _r(record.stt_rtf),
        "tts_rtf": _r(record.tts_rtf),
        "dropped_revisions": record.dropped_revisions,
    }


def placement_dict(placement: Placement, actual_device: str | None) -> dict:
    return {"stage": placement.stage, "backend": placement.backend, "model": placement.model,
            "device": str(placement.device), "actual_device": actual_device,
            "bundled": placement.bundled}


def engine_overhead(record: TurnRecord) -> float | None:
    """Voice-to-voice minus the silence wait and the compute on the critical path.

    What is left is the engine's own cost: queue hand-offs, thread wake-ups, the sink.
    Meaningful when nothing else ran at the same time (no speculation, one turn at once).
    """
    parts = (record.voice_to_voice, record.silence_wait, record.stt_compute_s,
             record.llm_first_chunk_compute_s, record.tts_first_compute_s)
    if any(p is None for p in parts):
        return None
    v2v, wait, stt, llm, tts = parts
    return v2v - wait - stt - llm - tts


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def format_turn(record: TurnRecord) -> str:
    """A few lines per turn for the terminal."""
    lines = [f"turn {record.turn_id}{' (cancelled)' if record.cancelled else ''}",
             f"  you:    {record.transcript or '(no words recognised)'}",
             f"  parley: {record.reply or '(no reply)'}"]
    timeline = record.timeline()
    if timeline:
        marks = "  ".join(f"{k}={v * 1000:+.0f}ms" for k, v in timeline.items() if k != "speech_start")
        lines.append(f"  timeline (after end of speech): {marks}")
    if record.voice_to_voice is not None:
        lines.append(f"  voice-to-voice: {record.voice_to_voice * 1000:.0f} ms")
    return "\n".join(lines)


BENCH_FIGURES = (
    ("voice_to_voice_s", "voice-to-voice"),
    ("silence_wait_s", "silence wait (VAD + grace)"),
    ("stt_compute_s", "STT compute (final segment)"),
    ("llm_first_chunk_compute_s", "LLM to first clause"),
    ("tts_first_compute_s", "TTS first chunk"),
    ("engine_overhead_s", "engine overhead"),
    ("llm_tokens_per_s", "LLM tokens/s"),
    ("stt_rtf", "STT real-time factor"),
    ("tts_rtf", "TTS real-time factor"),
)


def bench_summary(turns: list[dict]) -> dict:
    """p50/p95/min/max of every figure over all turns of all runs."""
    out = {}
    for key, _label in BENCH_FIGURES:
        values = [t[key] for t in turns if t.get(key) is not None and not t.get("cancelled")]
        out[key] = {"n": len(values), "p50": _r(percentile(values, 50)),
                    "p95": _r(percentile(values, 95)),
                    "min": _r(min(values)) if values else None,
                    "max": _r(max(values)) if values else None}
    return out


def format_bench(summary: dict) -> str:
    lines = [f"{'figure':32} {'n':>3} {'p50':>10} {'p95':>10} {'min':>10} {'max':>10}"]
    for key, label in BENCH_FIGURES:
        s = summary[key]
        unit_ms = key.endswith("_s")
        def fmt(v):
            if v is None:
                return "-"
            return f"{v * 1000:.1f} ms" if unit_ms else f"{v:.3f}"
        lines.append(f"{label:32} {s['n']:>3} {fmt(s['p50']):>10} {fmt(s['p95']):>10} "
                     f"{fmt(s['min']):>10} {fmt(s['max']):>10}")
    return "\n".join(lines)
