"""The panels of the daily comforts, light and dark, at 1280x800, on the real offline
models: the first-run check after it heard the bundled recording and played its sample
reply, the Assistant tab with the voices of the loaded voice, the history browser with a
search, the model manager. ``make screenshots`` writes them to resources/screenshots;
otherwise they go to a temporary folder (the drawing is still exercised)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.window.main_window import MainWindow
from engine.audio.file_sink import FileSink
from engine.audio.file_source import FileSource
from engine.config import EngineConfig
from engine.history.store import HistoryStore
from tests.support.history import finished_turn
from tests.support.screenshots import SIZE, screenshot_folder, shoot_light_and_dark

OFFLINE = {"stt.backend": "faster-whisper", "llm.backend": "transformers", "tts.backend": "piper",
           "turns.barge_in": "off"}


def _history(path: Path) -> Path:
    store = HistoryStore(path)
    first = store.start_conversation("desktop", [])
    store.add_turn(first, finished_turn(1, "What is the capital of France?", "Paris is the capital."))
    store.add_turn(first, finished_turn(2, "And how many people live there?", "About two million."))
    second = store.start_conversation("desktop", [])
    store.add_turn(second, finished_turn(3, "Use snake_case for names.", "Use **snake_case** for names."))
    store.close()
    return path


@pytest.mark.slow
def test_the_new_panels_light_and_dark(qtbot, gui_settings, tmp_path, one_two_three_path):
    from app.history.browser import HistoryDialog
    from app.onboarding.model_manager import ModelManagerDialog
    from app.onboarding.device_check import SetupCheckDialog

    folder = screenshot_folder(tmp_path)
    window = MainWindow(EngineConfig().with_overrides(OFFLINE), gui_settings, autoload=True)
    qtbot.addWidget(window)
    window.resize(*SIZE)
    window.show()
    qtbot.waitUntil(lambda: window.controller.engine is not None
                    and not window.controller.worker.busy, timeout=300_000)
    shots: list[Path] = []

    # The Assistant tab: the loaded voice's voices, speed, the prompt presets.
    window.tabs.setCurrentWidget(window.pages["Assistant"])
    qtbot.waitUntil(lambda: window.assistant_panel.voice_combo.count() > 0, timeout=30_000)
    shots += shoot_light_and_dark(qtbot, window, folder, "assistant")

    # The first-run check, after a real test of each device.
    dialog = SetupCheckDialog(window.controller, gui_settings, window,
                              source_factory=lambda _d: FileSource(one_two_three_path, realtime=True),
                              sink_factory=lambda _d: FileSink(None, realtime=False))
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.mouseClick(dialog.mic_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.mic_result is not None, timeout=60_000)
    qtbot.mouseClick(dialog.speaker_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.speaker_result is not None, timeout=60_000)
    assert dialog.mic_result.ok and dialog.speaker_result.ok
    shots += shoot_light_and_dark(qtbot, dialog, folder, "setup_check")
    dialog.done(0)

    # The history browser, searching.
    history = HistoryDialog(_history(tmp_path / "history.db"), window)
    qtbot.addWidget(history)
    history.show()
    history.search.setText("capital")
    history.search_now()
    history.wait_search()
    qtbot.waitUntil(lambda: history.results.count() > 0, timeout=10_000)
    history.open_hit(history.results.item(0))  # its conversation, the turn highlighted
    shots += shoot_light_and_dark(qtbot, history, folder, "history_browser")
    history.done(0)

    # The model manager: the bundled models the engine runs on, and what uses them.
    manager = ModelManagerDialog(window.controller, window)
    qtbot.addWidget(manager)
    manager.show()
    qtbot.waitUntil(lambda: manager.table.rowCount() > 0, timeout=60_000)
    shots += shoot_light_and_dark(qtbot, manager, folder, "model_manager")
    manager.done(0)

    assert len(shots) == 8 and all(p.stat().st_size > 10_000 for p in shots)
    window.close()
    QApplication.processEvents()
