"""Turn a causal LM (a .gguf, a model folder or a hub id) into an onnxruntime-genai folder, once.

onnxruntime-genai's model builder writes ``model.onnx`` (+ ``.data``), ``genai_config.json``
and the tokenizer files from a Hugging Face folder; int4 weights (MatMulNBits) are what
make a CPU decode fast. The builder loads the whole model with torch, so it runs in a
child process: the app never imports torch for it and the memory it took goes back when
it ends. A GGUF source is first turned into its safetensors folder
(``engine.backends.llm.gguf_convert``) in that same child.

The result is cached under ``cache_dir()/models/<source>-onnx-<precision>-<key>`` (see
``conversion_cache``): the key covers the source's content key, the precision and the
builder's version, so a new onnxruntime-genai converts again. A built app carries the
conversion of its bundled model. ``python -m engine.backends.llm.onnx_convert SOURCE OUT
PRECISION`` is the child's entry point.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from importlib import metadata
from pathlib import Path

from engine.backends.base import Progress, no_progress
from engine.backends.llm.conversion_cache import cache_folder, find_existing, write_once
from engine.errors import ModelError

#: int4 weights: ~3x the tokens/s of fp32 for SmolLM2-135M on 2 cores (README's table).
DEFAULT_PRECISION = "int4"
PRECISIONS = ("int4", "int8", "fp32")
WEIGHTS = "model.onnx"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                    "special_tokens_map.json", "generation_config.json")
_lock = threading.Lock()  # one conversion at a time in this process


def builder_version() -> str:
    """The installed onnxruntime-genai's version (its builder decides the files' format)."""
    try:
        return metadata.version("onnxruntime-genai")
    except metadata.PackageNotFoundError:
        return "none"


def _source_key(model: str) -> tuple[str, str]:
    """(a readable stem, a key of the source's content) for ``model`` as the user named it."""
    path = Path(model).expanduser()
    if model.lower().endswith(".gguf"):
        from engine.backends.llm.gguf_convert import cached_folder_path

        converted = cached_folder_path(path).name  # already a content key of the GGUF
        stem, _, key = converted.rpartition("-")
        return stem, key
    from engine.backends.llm.model_folder import resolve_model_folder

    folder = resolve_model_folder(model)
    digest = hashlib.sha256(str(folder.resolve()).encode())
    for name in sorted(os.listdir(folder)):
        item = folder / name
        if item.is_file():
            st = item.stat()
            digest.update(f"{name}:{st.st_size}:{st.st_mtime_ns};".encode())
    from engine.backends.llm import display_name

    return display_name(folder), digest.hexdigest()[:12]


def conversion_name(model: str, precision: str = DEFAULT_PRECISION) -> str:
    """The cache folder name of ``model``'s conversion at ``precision``."""
    stem, key = _source_key(model)
    final = hashlib.sha256(f"{key}:{precision}:{builder_version()}".encode()).hexdigest()[:12]
    return f"{stem}-onnx-{precision}-{final}"


def existing_conversion(model: str, precision: str = DEFAULT_PRECISION) -> Path | None:
    """The finished conversion of ``model`` (the user's cache, then the built app's), or None."""
    return find_existing(conversion_name(model, precision), WEIGHTS)


def converted_folder(model: str, precision: str = DEFAULT_PRECISION,
                     progress: Progress = no_progress) -> Path:
    """The onnxruntime-genai folder for ``model``, converting it the first time (~15 s for
    SmolLM2-135M, plus ~30 s when a GGUF is converted first).

    ModelError when the source cannot be read or the builder fails (with its last lines).
    """
    if precision not in PRECISIONS:
        raise ModelError(f"ONNX precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    found = existing_conversion(model, precision)
    if found is not None:
        return found
    folder = cache_folder(conversion_name(model, precision))
    with _lock:
        found = existing_conversion(model, precision)
        if found is not None:  # another thread converted it while we waited
            return found
        progress(None, f"converting {Path(model).name} for onnxruntime-genai ({precision}) once")
        started = time.perf_counter()

        def write(temp: Path) -> dict:
            _run_builder(model, temp, precision)
            source = {"source": model, "precision": precision, "builder": builder_version(),
                      "conversion_seconds": round(time.perf_counter() - started, 2)}
            if model.lower().endswith(".gguf"):
                source["gguf"] = str(Path(model).expanduser())  # the model list names it
            return source

        write_once(folder, write)
        progress(1.0, f"converted {Path(model).name} in {time.perf_counter() - started:.1f} s")
    return folder


def _run_builder(model: str, out: Path, precision: str) -> None:
    """Convert in a child process (in-process in a built app, which has no interpreter)."""
    if sys.__dict__.get("frozen"):  # set by PyInstaller's bootloader only
        build(model, out, precision)
        return
    cmd = [sys.executable, "-m", "engine.backends.llm.onnx_convert", model, str(out), precision]
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)}
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-6:])
        raise ModelError(f"onnxruntime-genai could not convert {model}: {tail}")


def build(model: str, out: Path, precision: str) -> None:
    """Run onnxruntime-genai's builder on ``model`` into ``out`` (imports torch: call it in
    a process that may)."""
    from engine.backends.llm.model_folder import resolve_model_folder

    try:
        from onnxruntime_genai.models.builder import create_model, parse_extra_options
    except ImportError as exc:
        raise ModelError(f"onnxruntime-genai's model builder cannot be imported ({exc}); "
                         "pip install 'parley[offline]'") from None
    source = resolve_model_folder(model)
    work = out / ".builder-cache"
    options = parse_extra_options(source.name, str(source), str(out), precision, "cpu",
                                  str(work), None)
    create_model(source.name, str(source), str(out), precision, "cpu", str(work), **options)
    shutil.rmtree(work, ignore_errors=True)
    for name in _TOKENIZER_FILES:  # the builder copies some; the chat template must come too
        if (source / name).is_file() and not (out / name).is_file():
            shutil.copy2(source / name, out / name)
    if not (out / WEIGHTS).is_file():
        raise ModelError(f"onnxruntime-genai's builder wrote no {WEIGHTS} for {model}")


def main(argv: list[str] | None = None) -> int:
    """The child process: ``SOURCE OUT PRECISION``; errors on stderr, exit status 1."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m engine.backends.llm.onnx_convert SOURCE OUT PRECISION",
              file=sys.stderr)
        return 2
    try:
        build(args[0], Path(args[1]), args[2])
    except ModelError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
