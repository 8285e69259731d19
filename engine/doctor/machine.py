"""The doctor's processor and Apple checks: cores, instruction sets and memory; the Mac's
chip, Rosetta, Metal through MLX, and torch's mps."""

from __future__ import annotations

import dataclasses

from engine.doctor.probes import Probes
from engine.doctor.readings import MlxReading, TorchReading
from engine.doctor.report import Finding, Section, info, ok, problem, warning

GIB = 2**30
LOW_MEMORY_BYTES = 2 * GIB  # below this free, loading the default models swaps or fails
X86 = ("x86_64", "amd64", "i386", "i686", "x86")
ARM = ("arm64", "aarch64", "armv8", "arm64e")
#: The extensions the CPU kernels of CTranslate2, onnxruntime and torch use, by family.
SHOWN_FEATURES = {"x86": ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni",
                          "avx512_bf16", "avx_vnni", "amx_tile"),
                  "arm": ("neon", "fp16", "dotprod", "bf16", "i8mm", "sve")}
_SLOW_CPU_FIX = ("keep the small bundled models, or put the STT and LLM stages on a GPU or on a "
                 "server (stt.base_url, llm.base_url)")


def _family(machine: str) -> str:
    machine = machine.lower()
    return "x86" if machine in X86 else "arm" if machine in ARM else ""


def check_cpu(probes: Probes) -> Section:
    """Cores, the instruction sets the CPU kernels need, and the memory free now."""
    cpu = probes.cpu()
    family = _family(cpu.machine)
    shown = SHOWN_FEATURES.get(family, ())
    features = {name: name in cpu.features for name in shown}
    facts = {**dataclasses.asdict(cpu), "features": features}
    have = ", ".join(name.upper() for name in shown if features[name]) or "none of " + ", ".join(shown)
    physical = f", {cpu.physical_cores} physical" if cpu.physical_cores else ""
    findings: list[Finding] = [ok(f"{cpu.model} ({cpu.machine}): {cpu.logical_cores} logical cores"
                                  f"{physical}; {have}")]
    if family == "x86" and not features["avx2"]:
        findings.append(warning("this processor has no AVX2: CTranslate2 (faster-whisper) and "
                                "onnxruntime fall back to slow code, and some torch builds do not run",
                                _SLOW_CPU_FIX))
    elif family == "arm" and not features["neon"]:
        findings.append(warning("this ARM processor reports no NEON: the CPU kernels run without "
                                "their vector code", _SLOW_CPU_FIX))
    if cpu.logical_cores < 4:
        findings.append(info(f"{cpu.logical_cores} cores: the CPU models share them, so replies on the "
                             "CPU are slow; the bundled small models are the ones to use here"))
    total, free = cpu.memory_total_bytes / GIB, cpu.memory_available_bytes / GIB
    if cpu.memory_available_bytes < LOW_MEMORY_BYTES:
        findings.append(warning(f"only {free:.1f} GiB of {total:.1f} GiB memory is free: loading the "
                                "models may swap or fail",
                                "close other programs, or use smaller models (the bundled ones)"))
    else:
        findings.append(info(f"memory: {free:.1f} GiB free of {total:.1f} GiB"))
    return Section("cpu", "Processor and memory", tuple(findings), facts)


def _mlx_findings(mlx: MlxReading | None, apple_silicon: bool) -> list[Finding]:
    if mlx is None:
        if apple_silicon:
            return [warning("MLX is not installed: the fast Apple Silicon backends (mlx-whisper, "
                            "mlx-lm) cannot be used", "pip install 'parley[mlx]'")]
        return []
    if mlx.error:
        return [problem(f"MLX {mlx.version} is installed but does not import: {mlx.error}",
                        "pip install --force-reinstall 'parley[mlx]' (recent MLX needs macOS 14 or "
                        "newer on Apple Silicon)")]
    if not apple_silicon:
        return [info(f"MLX {mlx.version} computes on {mlx.default_device} here; its Metal GPU "
                     "exists only on Apple Silicon Macs")]
    if not mlx.metal:
        return [problem(f"MLX {mlx.version} finds no Metal GPU (default device {mlx.default_device})",
                        "update macOS (MLX's Metal needs macOS 14 or newer) and reinstall: "
                        "pip install --force-reinstall mlx")]
    return [ok(f"MLX {mlx.version} computes on {mlx.default_device} (Metal)")]


def _mps_findings(torch: TorchReading | None) -> list[Finding]:
    if torch is None:
        return [info("torch is not installed: mps is unused (the MLX backends do not need it)")]
    if torch.error:
        return [problem(f"torch {torch.version} does not import: {torch.error}",
                        "pip install --force-reinstall torch")]
    if not torch.mps_available:
        built = "has no mps support" if not torch.mps_built else "finds no Metal device"
        return [warning(f"torch {torch.version} {built}: Kokoro and transformers run on the CPU",
                        "install an arm64 torch 2.4 or newer (pip install --force-reinstall torch) "
                        "on macOS 12.3 or newer")]
    return [ok(f"torch {torch.version}: mps is available")]


def check_apple(probes: Probes) -> Section:
    """On a Mac: the chip, Rosetta, MLX's Metal and torch's mps. Elsewhere: that there is none."""
    mlx = probes.mlx()
    facts: dict = {"mac": probes.system == "Darwin",
                   "mlx": dataclasses.asdict(mlx) if mlx is not None else None}
    if probes.system != "Darwin":
        findings = [info(f"not a Mac ({probes.system}): MLX's Metal and torch's mps are for Apple "
                         "Silicon"), *_mlx_findings(mlx, False)]
        return Section("apple", "Apple Silicon", tuple(findings), facts)
    mac = probes.mac()
    torch = probes.torch()
    facts.update(chip=mac.chip if mac else "", macos=mac.macos if mac else "",
                 rosetta=bool(mac and mac.rosetta),
                 mps={"built": torch.mps_built, "available": torch.mps_available} if torch else None)
    chip = (mac.chip if mac else "") or "unknown chip"
    if mac is not None and mac.rosetta:
        return Section("apple", "Apple Silicon", (problem(
            f"this Python runs under Rosetta (x86_64) on {chip}: MLX and mps cannot be used, and "
            "everything runs slowly", "install an arm64 Python (python.org's universal2 installer, "
            "or Homebrew's in /opt/homebrew) and reinstall Parley in a new virtual environment"),),
            facts)
    if _family(probes.machine) != "arm":
        return Section("apple", "Apple Silicon", (warning(
            f"an Intel Mac ({chip}): no MLX, and mps is slow; every stage runs on the CPU",
            _SLOW_CPU_FIX),), facts)
    findings = [ok(f"{chip}, macOS {mac.macos if mac else '?'}"), *_mlx_findings(mlx, True),
                *_mps_findings(torch)]
    return Section("apple", "Apple Silicon", tuple(findings), facts)
