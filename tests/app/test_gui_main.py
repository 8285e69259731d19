"""``parley`` / ``python -m app``: the command line, ``--config FILE``, startup errors, and
the push-to-talk key."""

from __future__ import annotations

import os
import subprocess
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtWidgets import QApplication

from app.main import main
from app.window.main_window import MainWindow
from engine.config import EngineConfig


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_main_and_close(argv: list[str]) -> tuple[int, list[MainWindow]]:
    seen: list[MainWindow] = []

    def close_windows() -> None:
        for w in QApplication.topLevelWidgets():
            if isinstance(w, MainWindow) and not w.closed:
                seen.append(w)
                w.close()

    QTimer.singleShot(1500, close_windows)
    return main(argv), seen


def test_config_file_sets_the_engine_config(qapp, tmp_path):
    toml = tmp_path / "parley.toml"
    toml.write_text('device = "cpu"\n[llm]\nmax_new_tokens = 42\n[turns]\nlive_transcription = true\n')
    ini = tmp_path / "settings.ini"
    status, windows = _run_main_and_close(["--config", str(toml), "--settings", str(ini), "--no-load"])
    assert status == 0 and len(windows) == 1
    config = windows[0].controller.config
    assert config == EngineConfig().with_overrides(
        {"device": "cpu", "llm.max_new_tokens": 42, "turns.live_transcription": True})
    assert windows[0].panel.live.isChecked()
    assert windows[0].panel.fields["llm.max_new_tokens"].value() == 42
    assert "parley.toml" in windows[0].banner.label.text()


def test_without_config_the_saved_settings_are_used(qapp, tmp_path):
    ini = tmp_path / "settings.ini"
    stored = QSettings(str(ini), QSettings.Format.IniFormat)
    stored.setValue("stt/beam_size", "3")
    stored.setValue("turns/barge_in", "off")
    stored.sync()
    status, windows = _run_main_and_close(["--settings", str(ini), "--no-load"])
    assert status == 0
    config = windows[0].controller.config
    assert config.stt.beam_size == 3 and config.turns.barge_in.value == "off"


def test_a_bad_config_file_is_an_error_naming_it(qapp, tmp_path, capsys):
    toml = tmp_path / "bad.toml"
    toml.write_text("[llm]\nmax_new_tokens = 'many'\n")
    assert main(["--config", str(toml), "--settings", str(tmp_path / "s.ini")]) == 2
    err = capsys.readouterr().err
    assert "bad.toml" in err and "llm.max_new_tokens" in err
    assert main(["--config", str(tmp_path / "missing.toml")]) == 2
    assert "not found" in capsys.readouterr().err


def test_python_dash_m_app_has_the_parley_command_line():
    out = subprocess.run([sys.executable, "-m", "app", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0
    assert "--config FILE" in out.stdout and "--self-test" in out.stdout


def test_push_to_talk_key_gates_the_microphone(qtbot, gui_settings):
    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    assert window.talk_key.button.isHidden()
    window.talk_key.check.setChecked(True)
    assert window.talk_key.button.isVisibleTo(window) and window.controller.push_to_talk
    qtbot.keyPress(window.conversation, Qt.Key.Key_Space)
    assert window.talk_key.button.property("talking") is True
    qtbot.keyRelease(window.conversation, Qt.Key.Key_Space)
    assert window.talk_key.button.property("talking") is False
    window.panel.ptt_key.setCurrentText("F8")
    qtbot.keyPress(window.conversation, Qt.Key.Key_F8)
    assert window.talk_key.button.property("talking") is True
    qtbot.keyRelease(window.conversation, Qt.Key.Key_F8)
    assert gui_settings.value("ui/ptt_key") == "F8"
    window.talk_key.check.setChecked(False)
    qtbot.keyPress(window.conversation, Qt.Key.Key_F8)
    assert window.talk_key.button.property("talking") is False
    window.close()


def test_closing_while_models_load_ends_the_process(tmp_path):
    # The window closes while the LLM loads; a load cannot be cut short, but it runs on a
    # daemon thread, so the process must still exit at once.
    script = (
        "import sys\n"
        "from PySide6.QtCore import QTimer\n"
        "from PySide6.QtWidgets import QApplication\n"
        "from app.main import main\n"
        "from app.window.main_window import MainWindow\n"
        "app = QApplication(sys.argv[:1])\n"
        "def poll():\n"
        "    for w in QApplication.topLevelWidgets():\n"
        "        if isinstance(w, MainWindow) and 'llm' in w.load_row.label.text():\n"
        "            print('closing during:', w.load_row.label.text(), flush=True)\n"
        "            w.close()\n"
        "            return\n"
        "    QTimer.singleShot(20, poll)\n"
        "QTimer.singleShot(20, poll)\n"
        f"sys.exit(main(['--settings', {str(tmp_path / 's.ini')!r}]))\n"
    )
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1")
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "closing during: Loading models — llm" in out.stdout
    assert time.perf_counter() - started < 60


def test_engine_errors_show_in_the_banner(qtbot, gui_settings):
    from engine.pipeline.events import EngineError

    window = MainWindow(EngineConfig(), gui_settings, autoload=False)
    qtbot.addWidget(window)
    window.show()
    assert window.banner.isHidden()
    window.bridge.on_event(EngineError(0, "tts", "Piper could not speak 'x': bad phoneme"))
    qtbot.waitUntil(window.banner.isVisible, timeout=2000)
    assert window.banner.label.text() == "tts stage: Piper could not speak 'x': bad phoneme"
    window.bridge.on_event(EngineError(0, "llm", "out of memory"))
    qtbot.waitUntil(lambda: "1 earlier message" in window.banner.label.text(), timeout=2000)
    window.banner.clear()
    assert window.banner.isHidden()
    window.close()
