"""The doctor's CUDA check: the driver and GPUs (free memory on each), torch's build, and
whether CTranslate2 (faster-whisper) and onnxruntime find CUDA, cuBLAS and cuDNN the way
they load them: by name, through the system's library search path.

The libraries are loaded after torch was read: torch's CUDA wheels load their own cuBLAS
and cuDNN when imported, and Parley imports torch (device discovery) before any backend
loads, so what loads here is what loads in Parley.
"""

from __future__ import annotations

import dataclasses
import re

from engine.doctor.probes import Probes
from engine.doctor.readings import Ct2Reading, GpuReading, OrtReading, TorchReading
from engine.doctor.report import Finding, Section, info, ok, problem, warning

GIB = 2**30
LOW_GPU_MEMORY_BYTES = 2 * GIB
TORCH_CUDA_INDEX = "https://download.pytorch.org/whl/cu128"
_CPU_FIX = ("if this machine has an NVIDIA GPU, install its driver (nvidia-smi must list the GPU); "
            "otherwise the stages run on the CPU (or on a server: llm.base_url)")


def ct2_needs(version: str) -> tuple[int, int]:
    """The CUDA and cuDNN major versions a CTranslate2 release is built for."""
    numbers = [int(n) for n in re.findall(r"\d+", version)[:2]] + [0, 0]
    if tuple(numbers[:2]) >= (4, 5):
        return 12, 9
    return (12, 8) if numbers[0] >= 4 else (11, 8)


def library_names(system: str, cuda: int, cudnn: int) -> tuple[str, ...]:
    """The cuBLAS and cuDNN files CTranslate2 loads by name, on ``system``."""
    if system == "Windows":
        dnn = (("cudnn64_9.dll", "cudnn_ops64_9.dll", "cudnn_cnn64_9.dll") if cudnn >= 9
               else (f"cudnn_ops_infer64_{cudnn}.dll", f"cudnn_cnn_infer64_{cudnn}.dll"))
        return (f"cublas64_{cuda}.dll", f"cublasLt64_{cuda}.dll", *dnn)
    dnn = (("libcudnn.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9") if cudnn >= 9
           else (f"libcudnn_ops_infer.so.{cudnn}", f"libcudnn_cnn_infer.so.{cudnn}"))
    return (f"libcublas.so.{cuda}", f"libcublasLt.so.{cuda}", *dnn)


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"


def _library_fix(probes: Probes, cuda: int, cudnn: int) -> str:
    """How to make the libraries loadable: pip's NVIDIA wheels, and the loader's path."""
    wheels = f"pip install nvidia-cublas-cu{cuda} 'nvidia-cudnn-cu{cuda}=={cudnn}.*'"
    sub = "bin" if probes.system == "Windows" else "lib"
    folders = [str(d / sub) for d in (probes.package_dir("nvidia.cublas"), probes.package_dir("nvidia.cudnn"))
               if d is not None]
    if probes.system == "Windows":
        where = ";".join(folders) or "the bin folders of nvidia\\cublas and nvidia\\cudnn in site-packages"
        return f"{wheels}, then add {where} to PATH (or install cuDNN {cudnn} and CUDA {cuda} from NVIDIA)"
    if len(folders) == 2:
        return ("the pip wheels are installed but not on the loader's path: export "
                f"LD_LIBRARY_PATH={':'.join(folders)}")
    return (f"{wheels}, then add the lib folders of nvidia/cublas and nvidia/cudnn in site-packages "
            "to LD_LIBRARY_PATH")


def _torch_findings(torch: TorchReading | None, driver: str) -> list[Finding]:
    if torch is None:
        return [info("torch is not installed (transformers and Kokoro need it: pip install "
                     "'parley[offline]')")]
    if torch.error:
        return [problem(f"torch {torch.version} does not import: {torch.error}",
                        f"pip install --force-reinstall torch --index-url {TORCH_CUDA_INDEX}")]
    if torch.cuda is None:
        return [problem(f"torch {torch.version} is a CPU-only build: transformers and Kokoro cannot "
                        "use the GPU",
                        f"pip install --force-reinstall torch --index-url {TORCH_CUDA_INDEX} (pytorch.org "
                        "lists the index for each CUDA version)")]
    if not torch.cuda_available:
        return [problem(f"torch {torch.version} (built for CUDA {torch.cuda}) sees no GPU: the driver "
                        f"{driver or '(not found)'} is older than CUDA {torch.cuda} needs, or not loaded",
                        f"update the NVIDIA driver to one for CUDA {torch.cuda} or newer (nvidia-smi "
                        "shows the 'CUDA Version' it supports), or install a torch built for an older CUDA")]
    return [ok(f"torch {torch.version}: CUDA {torch.cuda}, cuDNN {torch.cudnn}, "
               f"{len(torch.gpus)} GPU{'s' if len(torch.gpus) != 1 else ''}")]


def _ct2_findings(probes: Probes, ct2: Ct2Reading | None, libraries: dict[str, str]) -> list[Finding]:
    """``libraries``: each library ctranslate2 loads -> "" (it loads) or the loader's error."""
    if ct2 is None:
        return [info("ctranslate2 is not installed (faster-whisper's engine: pip install 'parley[offline]')")]
    cuda, cudnn = ct2_needs(ct2.version)
    if ct2.error:
        return [problem(f"ctranslate2 {ct2.version} cannot use CUDA: {ct2.error}",
                        _library_fix(probes, cuda, cudnn))]
    if not ct2.cuda_devices:
        return [problem(f"ctranslate2 {ct2.version} sees no CUDA device: faster-whisper runs on the CPU",
                        f"ctranslate2 {ct2.version} needs a driver for CUDA {cuda} (nvidia-smi's 'CUDA "
                        f"Version' {cuda}.0 or newer): update the NVIDIA driver")]
    found = [ok(f"ctranslate2 {ct2.version}: {ct2.cuda_devices} CUDA device"
                f"{'s' if ct2.cuda_devices != 1 else ''}, compute types {', '.join(ct2.cuda_compute_types)}")]
    failed = {name: error for name, error in libraries.items() if error}
    if failed:
        first = next(iter(failed.values()))
        found.append(problem(f"ctranslate2 {ct2.version} needs cuBLAS for CUDA {cuda} and cuDNN {cudnn}; "
                             f"{', '.join(failed)} do{'es' if len(failed) == 1 else ''} not load ({first})"
                             ": faster-whisper fails on the GPU", _library_fix(probes, cuda, cudnn)))
    else:
        found.append(ok(f"cuBLAS {cuda} and cuDNN {cudnn} load as ctranslate2 loads them: "
                        f"{', '.join(libraries)}"))
    return found


def _ort_findings(ort: OrtReading | None) -> list[Finding]:
    if ort is None:
        return []
    if ort.error:
        return [problem(f"onnxruntime does not import: {ort.error}",
                        "pip install --force-reinstall onnxruntime-gpu (or onnxruntime on the CPU)")]
    if "CUDAExecutionProvider" not in ort.providers:
        return [warning(f"onnxruntime {ort.version} has no CUDA provider ({', '.join(ort.providers)}): "
                        "Piper runs on the CPU (Silero VAD always does)",
                        "pip uninstall -y onnxruntime, then pip install 'parley[cuda]' (onnxruntime-gpu)")]
    return [ok(f"onnxruntime {ort.version}: {', '.join(ort.providers)}")]


def _gpu_findings(gpus: tuple[GpuReading, ...]) -> list[Finding]:
    found: list[Finding] = []
    for gpu in gpus:
        line = f"cuda:{gpu.index} {gpu.name}: {_gib(gpu.free_bytes)} free of {_gib(gpu.total_bytes)}"
        if gpu.free_bytes is not None and gpu.free_bytes < LOW_GPU_MEMORY_BYTES:
            found.append(warning(f"{line}: another program holds the rest",
                                 "close the programs nvidia-smi lists, or place a stage on the CPU "
                                 "(--stt-device cpu, [stt] device = \"cpu\")"))
        else:
            found.append(ok(line))
    return found


def check_cuda(probes: Probes) -> Section:
    """The NVIDIA driver, each GPU's free memory, and CUDA as torch, CTranslate2 and
    onnxruntime see it."""
    if probes.system == "Darwin":
        return Section("cuda", "NVIDIA CUDA", (info("CUDA does not exist on macOS: Apple Silicon "
                                                    "uses MLX and mps (see Apple Silicon)"),))
    smi, torch, ct2, ort = probes.nvidia_smi(), probes.torch(), probes.ct2(), probes.ort()
    torch_gpus = torch.gpus if torch is not None else ()
    gpus = torch_gpus or (smi.gpus if smi is not None else ())
    facts = {"driver": smi.driver if smi else None, "gpus": [dataclasses.asdict(g) for g in gpus],
             "torch": dataclasses.asdict(torch) if torch else None,
             "ctranslate2": dataclasses.asdict(ct2) if ct2 else None,
             "onnxruntime": dataclasses.asdict(ort) if ort else None, "libraries": {}}
    sees_gpu = bool(gpus) or bool(ct2 and ct2.cuda_devices)
    if smi is None and not sees_gpu:
        return Section("cuda", "NVIDIA CUDA", (warning(
            "no NVIDIA GPU found (no NVIDIA driver: nvidia-smi is not installed): every stage runs "
            "on the CPU", _CPU_FIX),), facts)
    findings: list[Finding] = []
    if smi is not None and smi.driver:
        findings.append(ok(f"NVIDIA driver {smi.driver}"))
    if not sees_gpu:
        findings.append(problem("the NVIDIA driver is installed but no GPU answers (nvidia-smi lists "
                                "none): every stage runs on the CPU",
                                "run nvidia-smi to see why; after a driver update, reboot so that "
                                "its kernel module loads"))
        findings += _torch_findings(torch, smi.driver if smi else "")
        return Section("cuda", "NVIDIA CUDA", tuple(findings), facts)
    # Loaded after torch was read, as in Parley (see the module's docstring).
    libraries = ({name: probes.load_library(name) for name in library_names(probes.system,
                                                                           *ct2_needs(ct2.version))}
                 if ct2 is not None and ct2.cuda_devices else {})
    facts["libraries"] = {name: error or "loaded" for name, error in libraries.items()}
    findings += _gpu_findings(gpus)
    findings += _torch_findings(torch, smi.driver if smi else "")
    findings += _ct2_findings(probes, ct2, libraries)
    findings += _ort_findings(ort)
    return Section("cuda", "NVIDIA CUDA", tuple(findings), facts)
