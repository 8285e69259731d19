"""The doctor's Python check: the interpreter, and the versions of the packages Parley runs on."""

from __future__ import annotations

from engine.doctor.probes import Probes
from engine.doctor.report import Finding, Section, info, ok, problem

#: The distributions whose versions a bug report needs, as PyPI names them.
PACKAGES = ("parley", "numpy", "torch", "ctranslate2", "onnxruntime", "onnxruntime-gpu",
            "onnxruntime-genai", "faster-whisper",
            "transformers", "huggingface-hub", "silero-vad", "piper-tts", "kokoro", "mlx", "mlx-lm",
            "mlx-whisper", "PySide6-Essentials", "PySide6", "sounddevice", "aiohttp", "openai",
            "livekit", "psutil")
MIN_PYTHON = (3, 11)


def check_python(probes: Probes) -> Section:
    """Python's version and build, and the installed packages' versions."""
    python = probes.python()
    bits = probes.pointer_bits()
    versions = {dist: probes.version(dist) for dist in PACKAGES}
    facts = {"python": python["version"], "implementation": python["implementation"],
             "executable": python["executable"], "virtualenv": probes.in_virtualenv(), "bits": bits,
             "packages": versions}
    findings: list[Finding] = []
    numbers = tuple(int(p) for p in python["version"].split(".")[:2] if p.isdigit())
    if numbers < MIN_PYTHON:
        findings.append(problem(f"Python {python['version']} is older than Parley needs "
                                f"({'.'.join(map(str, MIN_PYTHON))} or newer)",
                                "install Python 3.11 or newer and reinstall Parley in a new virtual "
                                "environment"))
    elif bits == 32:
        findings.append(problem(f"this Python {python['version']} is a 32-bit build: torch, "
                                "ctranslate2 and onnxruntime ship only 64-bit wheels",
                                "install the 64-bit Python (python.org: 'Windows installer (64-bit)') "
                                "and reinstall Parley with it"))
    else:
        where = "a virtual environment" if facts["virtualenv"] else "no virtual environment"
        findings.append(ok(f"Python {python['version']} ({python['implementation']}, {bits}-bit, "
                           f"{where}) at {python['executable']}"))
    present = [f"{dist} {v}" for dist, v in versions.items() if v is not None]
    findings.append(info("packages: " + ", ".join(present)))
    if versions["parley"] is None:
        findings.append(info("parley itself is not installed as a package (running from a "
                             "source folder or the packaged app)"))
    if versions["onnxruntime"] and versions["onnxruntime-gpu"]:
        findings.append(problem(
            f"both onnxruntime {versions['onnxruntime']} and onnxruntime-gpu "
            f"{versions['onnxruntime-gpu']} are installed: they share one module, and the one "
            "installed last wins (often the CPU-only one)",
            "pip uninstall -y onnxruntime onnxruntime-gpu, then pip install onnxruntime-gpu "
            "(an NVIDIA GPU) or pip install onnxruntime (CPU only)"))
    return Section("python", "Python and packages", tuple(findings), facts)
