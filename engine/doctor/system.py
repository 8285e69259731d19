"""The doctor's real probes: each reads one thing of this machine and returns a reading
(``engine.doctor.readings``), never a verdict; the checks judge.

Libraries are imported only here and only when a probe runs (torch, ctranslate2,
onnxruntime, mlx, sounddevice, huggingface_hub). Qt is never imported into this process:
``start_qt`` starts it in a child Python and reads what it printed. Every probe returns
within its timeout: programs and the hub are asked with one.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from engine.config import EngineConfig
from engine.doctor.readings import (AudioScan, CommandOutput, ConfiguredDevice, CpuReading, Ct2Reading,
                                    GpuReading, MacReading, MlxReading, NvidiaSmi, OrtReading, QtAnswer,
                                    TorchReading)

PROGRAM_TIMEOUT_S = 5.0
QT_TIMEOUT_S = 20.0  # a first start of Qt on a cold disk can take seconds
MIB = 2**20


# ---------------------------------------------------------------------- packages and files
def installed(module: str) -> bool:
    """True when ``module`` (dotted) can be found, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that is not a package, a broken __spec__
        return False


def dist_version(dist: str) -> str | None:
    """The installed version of the distribution ``dist`` (a PyPI name), or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_dir(module: str) -> Path | None:
    """The folder of an installed package (``nvidia.cudnn``), found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    return Path(locations[0]) if locations else None


def run_program(args: Sequence[str], timeout: float = PROGRAM_TIMEOUT_S) -> CommandOutput | None:
    """Run a program and capture its output; None when it is not installed."""
    if shutil.which(args[0]) is None:
        return None
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                              errors="replace")
    except subprocess.TimeoutExpired:
        return CommandOutput(-1, "", f"{args[0]} did not answer within {timeout:g} s")
    except OSError as exc:
        return CommandOutput(-1, "", f"{args[0]} could not be started: {exc}")
    return CommandOutput(done.returncode, done.stdout, done.stderr)


def load_library(name: str) -> str:
    """Load a shared library the way a library that needs it would (by name, through the
    system's search path): "" when it loads, else the loader's error."""
    try:
        ctypes.CDLL(name)
    except OSError as exc:
        return str(exc) or f"{name} did not load"
    return ""


def read_text(path: str) -> str | None:
    """A small system file's text (``/proc/cpuinfo``), or None where there is none."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def disk_usage(path: Path) -> tuple[int, int, int]:
    """``(total, used, free)`` bytes of the disk that holds ``path`` (or would: the nearest
    folder above it that exists)."""
    path = Path(path).expanduser()
    while not path.exists() and path.parent != path:
        path = path.parent
    usage = shutil.disk_usage(path)
    return usage.total, usage.used, usage.free


def folder_bytes(path: Path) -> int:
    """The bytes of every file under ``path`` (0 when it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


# ---------------------------------------------------------------------- the hub
def hub_head(url: str, timeout: float) -> str:
    """Ask ``url`` with one HEAD request: "" when a server answered (any HTTP status),
    else why not. Proxies come from the environment, as huggingface_hub's do."""
    request = urllib.request.Request(url, method="HEAD", headers={"User-Agent": "parley-doctor"})
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return ""
    except urllib.error.HTTPError:
        return ""  # an answer, even a refusal, means the hub is there
    except urllib.error.URLError as exc:
        return str(exc.reason)
    except (TimeoutError, OSError, ValueError) as exc:
        return str(exc) or type(exc).__name__


def model_download_bytes(model: str, timeout: float) -> int | None:
    """The bytes a hub model (``org/name`` or ``org/name:file``) downloads, as the hub lists
    its files; None when the hub cannot say."""
    repo, _, file = model.partition(":")
    try:
        from huggingface_hub import HfApi

        info = HfApi().model_info(repo, files_metadata=True, timeout=timeout)
    except Exception:  # noqa: BLE001 - any hub failure only means the size is unknown
        return None
    sizes = {s.rfilename: s.size or 0 for s in info.siblings or ()}
    if file:
        return sizes.get(file, 0) + sizes.get(file + ".json", 0) if file in sizes else None
    return sum(sizes.values())


# ---------------------------------------------------------------------- the processor
_X86_FLAGS = {"avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c", "avx512f": "avx512f",
              "avx512bw": "avx512bw", "avx512_vnni": "avx512_vnni", "avx512_bf16": "avx512_bf16",
              "avx_vnni": "avx_vnni", "amx_tile": "amx_tile"}
_ARM_FLAGS = {"asimd": "neon", "neon": "neon", "asimdhp": "fp16", "sve": "sve", "bf16": "bf16",
              "i8mm": "i8mm", "asimddp": "dotprod"}
_WINDOWS_FEATURES = {"avx": 39, "avx2": 40, "avx512f": 41, "neon": 19}  # IsProcessorFeaturePresent


def _cpu_features(system: str, machine: str) -> frozenset[str]:
    if system == "Linux":
        text = read_text("/proc/cpuinfo") or ""
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                words = value.split()
                return frozenset(name for word in words
                                 for name in (_X86_FLAGS.get(word), _ARM_FLAGS.get(word)) if name)
        return frozenset()
    if system == "Darwin":
        if machine == "arm64":
            return frozenset({"neon", "fp16", "dotprod"})  # every Apple Silicon chip has them
        out = run_program(["sysctl", "-n", "machdep.cpu.features", "machdep.cpu.leaf7_features"])
        words = (out.stdout.lower().replace("avx1.0", "avx").split() if out else [])
        return frozenset(w for w in words if w in _X86_FLAGS)
    if system == "Windows":
        present = ctypes.windll.kernel32.IsProcessorFeaturePresent  # type: ignore[attr-defined]
        return frozenset(name for name, number in _WINDOWS_FEATURES.items() if present(number))
    return frozenset()


def _cpu_model(system: str) -> str:
    if system == "Linux":
        for line in (read_text("/proc/cpuinfo") or "").splitlines():
            if line.startswith(("model name", "Model")):
                return line.split(":", 1)[1].strip()
    if system == "Darwin":
        out = run_program(["sysctl", "-n", "machdep.cpu.brand_string"])
        if out and out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    return platform.processor() or platform.machine() or "unknown"


def read_cpu() -> CpuReading:
    """The processor and the memory of this machine."""
    import psutil

    system, machine = platform.system(), platform.machine()
    memory = psutil.virtual_memory()
    return CpuReading(_cpu_model(system), machine, os.cpu_count() or 1, psutil.cpu_count(logical=False),
                      _cpu_features(system, machine), memory.total, memory.available)


def read_mac() -> MacReading | None:
    """The Mac's chip, macOS and Rosetta; None on another system."""
    if platform.system() != "Darwin":
        return None
    chip = run_program(["sysctl", "-n", "machdep.cpu.brand_string"])
    translated = run_program(["sysctl", "-n", "sysctl.proc_translated"])
    return MacReading(chip.stdout.strip() if chip else "", platform.mac_ver()[0],
                      bool(translated and translated.stdout.strip() == "1"))


# ---------------------------------------------------------------------- GPUs and their libraries
def _mib(text: str) -> int | None:
    try:
        return int(float(text)) * MIB
    except ValueError:  # "[N/A]"
        return None


def read_nvidia_smi() -> NvidiaSmi | None:
    """The NVIDIA driver and GPUs, from ``nvidia-smi`` (else the Linux driver's version
    file); None when no NVIDIA driver is installed."""
    out = run_program(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,memory.free",
                       "--format=csv,noheader,nounits"])
    if out is not None and out.returncode == 0:
        gpus, driver = [], ""
        for line in out.stdout.strip().splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) == 5 and cells[0].isdigit():
                gpus.append(GpuReading(int(cells[0]), cells[1], _mib(cells[3]), _mib(cells[4])))
                driver = cells[2]
        return NvidiaSmi(driver, tuple(gpus))
    version = read_text("/proc/driver/nvidia/version")
    if version:
        words = version.split()
        driver = next((w for w in words if w[:1].isdigit() and "." in w), "unknown")
        return NvidiaSmi(driver)
    if out is not None:  # installed, but it failed: a driver that is not loaded
        return NvidiaSmi("", ())
    return None


def read_torch() -> TorchReading | None:
    """torch's build and what it sees; None when it is not installed."""
    if not installed("torch"):
        return None
    version = dist_version("torch") or "?"
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken install raises anything (OSError: a DLL)
        return TorchReading(version, error=f"{type(exc).__name__}: {exc}")
    gpus: list[GpuReading] = []
    available = torch.cuda.is_available()
    if available:
        for index in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(index)
            gpus.append(GpuReading(index, torch.cuda.get_device_name(index), total, free))
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return TorchReading(torch.__version__, torch.version.cuda, cudnn, available, tuple(gpus),
                        torch.backends.mps.is_built(), torch.backends.mps.is_available())


def read_ct2() -> Ct2Reading | None:
    """CTranslate2's CUDA devices and compute types; None when it is not installed."""
    if not installed("ctranslate2"):
        return None
    version = dist_version("ctranslate2") or "?"
    try:
        import ctranslate2

        count = ctranslate2.get_cuda_device_count()
        types = tuple(sorted(ctranslate2.get_supported_compute_types("cuda"))) if count else ()
    except Exception as exc:  # noqa: BLE001 - a library that cannot find CUDA raises anything
        return Ct2Reading(version, error=f"{type(exc).__name__}: {exc}")
    return Ct2Reading(ctranslate2.__version__, count, types)


def read_ort() -> OrtReading | None:
    """onnxruntime's execution providers; None when it is not installed."""
    if not installed("onnxruntime"):
        return None
    try:
        import onnxruntime
    except Exception as exc:  # noqa: BLE001 - a broken install raises anything
        return OrtReading("?", error=f"{type(exc).__name__}: {exc}")
    return OrtReading(onnxruntime.__version__, tuple(onnxruntime.get_available_providers()))


def read_mlx() -> MlxReading | None:
    """MLX's Metal support and default device; None when it is not installed."""
    if not installed("mlx"):
        return None
    version = dist_version("mlx") or "?"
    try:
        import mlx.core as mx

        metal = mx.metal.is_available()
        default = str(mx.default_device())
    except Exception as exc:  # noqa: BLE001 - mlx without its native library raises anything
        return MlxReading(version, error=f"{type(exc).__name__}: {exc}")
    return MlxReading(version, metal, default)


# ---------------------------------------------------------------------- sound
def scan_audio(config: EngineConfig) -> AudioScan:
    """PortAudio's version, the sound devices, and the ones ``config`` names."""
    from engine.audio.sd_devices import list_audio_devices, resolve_device
    from engine.errors import AudioDeviceError

    try:
        import sounddevice
    except ImportError:
        return AudioScan(missing="sounddevice")
    except OSError:  # sounddevice's way of saying the PortAudio library is missing
        return AudioScan(missing="portaudio")
    try:
        version = sounddevice.get_portaudio_version()[1]
        inputs, outputs = list_audio_devices()
    except sounddevice.PortAudioError as exc:
        return AudioScan(error=str(exc))
    configured = []
    for kind, setting in (("input", config.audio.input_device), ("output", config.audio.output_device)):
        try:
            configured.append(ConfiguredDevice(kind, str(setting), resolve_device(setting, kind).label))
        except AudioDeviceError as exc:
            configured.append(ConfiguredDevice(kind, str(setting), error=str(exc)))
    return AudioScan(str(version), "", tuple(inputs), tuple(outputs), tuple(configured))


# ---------------------------------------------------------------------- Qt, in a child process
#: Run by a child Python: prints one JSON object per line as it gets further, so what it
#: printed before Qt aborted says how far it got. ``argv[1]``: the platform plugin Qt
#: will try first, or "".
QT_SCRIPT = r"""
import ctypes, json, sys
from pathlib import Path
def say(**kw):
    print(json.dumps(kw), flush=True)
from PySide6.QtCore import QLibraryInfo, qVersion
folder = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms"
files = sorted(p for p in folder.glob("*") if p.suffix in (".so", ".dylib", ".dll"))
names = {p.stem.removeprefix("lib").removeprefix("q"): p for p in files}
say(qt=qVersion(), plugins=sorted(names))
wanted = sys.argv[1]
if wanted in names:
    try:
        ctypes.CDLL(str(names[wanted]))
    except OSError as exc:
        say(load_error=str(exc))
from PySide6.QtGui import QGuiApplication
app = QGuiApplication(sys.argv[:1])
say(platform=QGuiApplication.platformName())
"""


def first_platform(env: Mapping[str, str], system: str) -> str:
    """The platform plugin Qt tries first here ("" when it picks at run time)."""
    asked = env.get("QT_QPA_PLATFORM", "").strip()
    if asked:
        names = [n.split(":", 1)[0].strip() for n in asked.split(";") if n.strip()]
        return names[0] if names else ""
    if system == "Linux":
        return "" if env.get("WAYLAND_DISPLAY") or env.get("XDG_SESSION_TYPE") == "wayland" else "xcb"
    return {"Darwin": "cocoa", "Windows": "windows"}.get(system, "")


def start_qt(env: Mapping[str, str]) -> QtAnswer | None:
    """Start Qt's GUI in a child Python and say how far it got; None in the packaged app
    (no Python to start: the app reads its own Qt instead)."""
    if getattr(sys, "frozen", False):  # PyInstaller's attribute, absent from a plain Python
        return None
    args = [sys.executable, "-c", QT_SCRIPT, first_platform(env, platform.system())]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=QT_TIMEOUT_S,
                              env=dict(env), errors="replace")
    except subprocess.TimeoutExpired:
        return QtAnswer(error=f"Qt did not start within {QT_TIMEOUT_S:g} s")
    said: dict = {}
    for line in done.stdout.splitlines():
        try:
            said.update(json.loads(line))
        except ValueError:
            continue
    error = "" if "platform" in said else _last_words(done.stderr, done.returncode)
    return QtAnswer(said.get("qt", ""), said.get("platform", ""), tuple(said.get("plugins", ())),
                    said.get("load_error", ""), error)


def _last_words(stderr: str, returncode: int) -> str:
    """Qt's reason, from its screenful: the lines that name the cause."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    causes = [line for line in lines if "qt.qpa" in line or "Error" in line or "error" in line]
    return " / ".join(causes[:3]) or (lines[-1] if lines else f"exit status {returncode}")
