"""Settings: the spoken language (Auto or one) and a voice per reply language."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtWidgets import QComboBox, QLineEdit

from app.settings.panel import SettingsPanel
from engine.config import EngineConfig
from tests.support.gui import panel_devices


@pytest.fixture
def panel(qtbot):
    w = SettingsPanel(EngineConfig(), devices=panel_devices())
    qtbot.addWidget(w)
    return w


def test_language_is_auto_or_a_named_language_and_voices_a_mapping(panel, qtbot):
    language = panel.fields["stt.language"]
    assert isinstance(language, QComboBox)
    items = [(language.itemData(i), language.itemText(i)) for i in range(language.count())]
    assert items[0] == ("auto", "Auto (detected per turn)")
    assert ("fr", "French (fr)") in items and ("de", "German (de)") in items
    assert language.currentData() == "en"  # the default setting is shown
    language.setCurrentIndex(language.findData("auto"))
    voices = panel.fields["tts.voices"]
    assert isinstance(voices, QLineEdit)
    voices.setText("fr=/voices/fr_FR-siwis-medium.onnx, ja=none")
    with qtbot.waitSignal(panel.apply_requested, timeout=1000) as blocker:
        panel.apply_button.click()
    config = blocker.args[0]
    assert config.stt.language == "auto"
    assert config.tts.voice_map == {"fr": "/voices/fr_FR-siwis-medium.onnx", "ja": "none"}


def test_a_bad_voice_mapping_is_named_and_not_applied(panel, qtbot):
    panel.fields["tts.voices"].setText("fr")
    applied = []
    panel.apply_requested.connect(applied.append)
    panel.apply_button.click()
    assert not applied
    assert "'tts.voices'" in panel.message.text()


def test_the_conversation_marks_a_turn_whose_language_changed(qtbot):
    import dataclasses

    from app.conversation.view import ConversationView
    from tests.support.gui import recorded_metrics

    view = ConversationView()
    qtbot.addWidget(view)
    base = recorded_metrics(1).turns()[0]
    for turn, language in ((1, "en"), (2, "fr"), (3, "fr"), (4, "en")):
        view.on_finished(dataclasses.replace(base, turn_id=turn, transcript=f"turn {turn}",
                                             language=language))
    captions = {turn: view.item(turn).user_caption.text() for turn in (1, 2, 3, 4)}
    assert captions == {1: "You", 2: "You  ·  language: fr", 3: "You", 4: "You  ·  language: en"}
