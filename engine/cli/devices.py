"""``parley-cli devices``: compute devices (with memory), remote servers and sound cards.

A stage whose ``base_url`` is set (``--llm-base-url``, ``[llm] base_url`` in a config
file) lists its server as a ``remote`` device, probed now: available, or why not."""

from __future__ import annotations

import dataclasses
import sys

from engine.backends.remote_probe import discover_remote
from engine.cli.output import write_json
from engine.config import EngineConfig
from engine.runtime.devices import discover_devices
from engine.runtime.memory import sample_memory


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def run_devices(as_json: bool, config: EngineConfig | None = None) -> int:
    remote = discover_remote(config) if config is not None else []
    devices = discover_devices()
    present = {str(d.device) for d in devices if d.available}
    memory = {m.device: m for m in sample_memory(present)}
    try:
        from engine.audio.sd_devices import list_audio_devices

        inputs, outputs = list_audio_devices()
        audio_error = None
    except Exception as exc:  # noqa: BLE001 - no PortAudio is a fact to show, not a crash
        inputs, outputs, audio_error = [], [], str(exc)
    if as_json:
        write_json({
            "devices": [{"device": str(d.device), "name": d.name, "available": d.available,
                         "reason": d.reason, "total_bytes": d.total_bytes, "free_bytes": d.free_bytes,
                         "memory": ({"used_bytes": memory[str(d.device)].used_bytes,
                                     **memory[str(d.device)].extra}
                                    if str(d.device) in memory else None)}
                        for d in devices]
                       + [{"device": str(d.device), "name": d.name, "available": d.available,
                           "reason": d.reason, "stages": list(d.stages)} for d in remote],
            "audio_inputs": [dataclasses.asdict(i) for i in inputs],
            "audio_outputs": [dataclasses.asdict(o) for o in outputs],
            "audio_error": audio_error,
        })
        return 0
    print("Compute devices:")
    for d in devices:
        state = "available" if d.available else f"not available: {d.reason}"
        line = f"  {d.device!s:8} {d.name} — {state}"
        if d.total_bytes:
            line += f" (total {_gib(d.total_bytes)}, free {_gib(d.free_bytes)})"
        reading = memory.get(str(d.device))
        if reading and reading.device == "mlx":
            line += (f" [active {_gib(reading.used_bytes)}, peak {_gib(reading.extra['peak'])}, "
                     f"cache {_gib(reading.extra['cache'])}]")
        print(line)
    for d in remote:
        state = "available" if d.available else f"not available: {d.reason}"
        print(f"  {d.label} — {', '.join(d.stages)} — {state}")
    print("Sound inputs:" if inputs else "Sound inputs: none found")
    for i in inputs:
        print(f"  {i.label}")
    print("Sound outputs:" if outputs else "Sound outputs: none found")
    for o in outputs:
        print(f"  {o.label}")
    if audio_error:
        print(f"  (audio: {audio_error})", file=sys.stderr)
    return 0
