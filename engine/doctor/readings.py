"""What the doctor's probes read of the machine, typed: the data the checks judge.

A probe (``engine.doctor.probes``) returns one of these; a test builds them by hand to
stand for another machine (no GPU, no PortAudio, a broken library). ``error`` fields hold
why a library that is installed could not be read (it does not import, it raised).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.audio.sd_devices import AudioDevice


@dataclass(frozen=True, slots=True)
class CommandOutput:
    """A program that ran: its exit status and its output (a timeout: status -1)."""

    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One NVIDIA GPU and its memory now."""

    index: int
    name: str
    total_bytes: int | None = None
    free_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class NvidiaSmi:
    """What ``nvidia-smi`` (or ``/proc/driver/nvidia/version``) says: the driver and the GPUs."""

    driver: str
    gpus: tuple[GpuReading, ...] = ()


@dataclass(frozen=True, slots=True)
class CpuReading:
    """The processor, its instruction-set extensions (lower case: avx2, avx512f, neon...)
    and the memory of the machine."""

    model: str
    machine: str
    logical_cores: int
    physical_cores: int | None
    features: frozenset[str]
    memory_total_bytes: int
    memory_available_bytes: int


@dataclass(frozen=True, slots=True)
class TorchReading:
    """torch as this process loads it: its build (CUDA runtime, cuDNN) and what it sees."""

    version: str
    cuda: str | None = None  # the CUDA runtime it was built with; None: a CPU or Metal build
    cudnn: int | None = None
    cuda_available: bool = False
    gpus: tuple[GpuReading, ...] = ()
    mps_built: bool = False
    mps_available: bool = False
    error: str = ""


@dataclass(frozen=True, slots=True)
class Ct2Reading:
    """CTranslate2 (faster-whisper's engine): the CUDA devices it sees, its compute types."""

    version: str
    cuda_devices: int = 0
    cuda_compute_types: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True, slots=True)
class OrtReading:
    """onnxruntime (Silero VAD, Piper): its execution providers."""

    version: str
    providers: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True, slots=True)
class MlxReading:
    """MLX: whether Metal is there, and the device it computes on by default."""

    version: str
    metal: bool = False
    default_device: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class MacReading:
    """A Mac: its chip, macOS version, and whether this Python runs under Rosetta."""

    chip: str
    macos: str
    rosetta: bool


@dataclass(frozen=True, slots=True)
class ConfiguredDevice:
    """The sound device a setting names, found (``label``) or not (``error``)."""

    kind: str  # "input" or "output"
    setting: str
    label: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class AudioScan:
    """PortAudio and the sound devices. ``missing``: "" when sounddevice and PortAudio
    load, "sounddevice" (the Python package) or "portaudio" (the shared library)."""

    portaudio: str = ""
    missing: str = ""
    inputs: tuple[AudioDevice, ...] = ()
    outputs: tuple[AudioDevice, ...] = ()
    configured: tuple[ConfiguredDevice, ...] = ()
    error: str = ""  # PortAudio loaded but listing the devices failed


@dataclass(frozen=True, slots=True)
class QtAnswer:
    """Whether Qt starts here: its version, the platform plugin that started (or why not),
    the plugins installed. ``live``: read from the running app, not a child process."""

    qt: str = ""
    platform: str = ""
    plugins: tuple[str, ...] = ()
    load_error: str = ""  # the platform plugin's shared library did not load
    error: str = ""  # Qt did not start: its last words
    live: bool = False
    notes: tuple[str, ...] = field(default=())
