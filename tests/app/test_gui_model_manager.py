"""File > Models…: the table shows the cached models with sizes, precision, expected speed
and users, and warns about a full-precision LLM a stage runs on Apple Silicon; Remove asks
first and refuses a model a loaded stage uses; Download fails clearly when offline;
every control has an accessible name and a tab stop."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractButton, QMainWindow, QMenu, QTableWidget

from app.onboarding.downloads import DownloadState
from app.onboarding.model_manager import ModelManagerDialog, install, wanted_downloads
from tests.support.hub import make_hub_repo


@pytest.fixture
def caches(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("PARLEY_CACHE_DIR", str(tmp_path / "parley"))
    make_hub_repo(hub, "org/tiny-stt", {"model.bin": 5000})
    make_hub_repo(hub, "org/small-llm", {"model.safetensors": 2_500_000})
    conv = tmp_path / "parley" / "models" / "Small-0123456789ab"
    conv.mkdir(parents=True)
    (conv / "model.safetensors").write_bytes(b"s" * 3000)
    (conv / "parley_source.json").write_text(json.dumps({"gguf": "/nowhere/Small.gguf"}))
    return hub


def _placement(stage, model, backend="transformers", bundled=False, device="cpu"):
    return SimpleNamespace(stage=stage, model=model, backend=backend, bundled=bundled,
                           endpoint="", device=SimpleNamespace(kind=device),
                           spec=SimpleNamespace(hub_model=lambda kind: None))


def _controller(*placements, loaded=("stt",)):
    engine = SimpleNamespace(placements={p.stage: p for p in placements},
                             models={s: object() for s in loaded})
    return SimpleNamespace(engine=engine, config=None)


def _open(qtbot, controller=None):
    dialog = ModelManagerDialog(controller, bundled=False)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.scan is not None and not dialog.busy, timeout=10000)
    return dialog


def _rows(dialog):
    return {dialog.table.item(r, 0).text(): [dialog.table.item(r, c).text()
                                             for c in range(dialog.table.columnCount())]
            for r in range(dialog.table.rowCount())}


def test_the_table_shows_each_model_its_kind_size_and_user(qtbot, caches):
    dialog = _open(qtbot, _controller(_placement("stt", "org/tiny-stt", "faster-whisper")))
    rows = _rows(dialog)
    assert set(rows) == {"org/tiny-stt", "org/small-llm", "Small-0123456789ab"}
    assert rows["org/small-llm"][1:3] == ["hub", "2.5 MB"]
    assert rows["org/tiny-stt"][2] == "5.0 kB" and rows["org/tiny-stt"][6] == "stt (loaded)"
    assert rows["org/small-llm"][3:5] == ["unknown", "unknown"]  # no name, config or user tells
    assert rows["Small-0123456789ab"][1] == "parley cache"
    assert dialog.total.text().startswith("3 models, 2.5 MB")
    dialog.done(0)


def test_precision_speed_and_the_bf16_warning(qtbot, caches):
    make_hub_repo(caches, "mlx-community/Qwen3-4B-Instruct-2507-bf16", {"model.safetensors": 8000})
    tiny = make_hub_repo(caches, "someone/tiny-chat", {"config.json": 1, "model.safetensors": 4000})
    (next((tiny / "snapshots").iterdir()) / "config.json").write_text(
        json.dumps({"quantization": {"bits": 4, "group_size": 64}}))
    bf16 = _placement("llm", "mlx-community/Qwen3-4B-Instruct-2507-bf16", "mlx-lm", device="mlx")
    dialog = _open(qtbot, _controller(bf16, _placement("stt", "org/tiny-stt", "faster-whisper"),
                                      loaded=("llm", "stt")))
    rows = _rows(dialog)
    assert rows["mlx-community/Qwen3-4B-Instruct-2507-bf16"][3:5] == ["bf16", "slow on MLX"]
    assert rows["someone/tiny-chat"][3:5] == ["4-bit", "fast on MLX"]  # an MLX build, from its config
    assert rows["org/tiny-stt"][4] == "fast on CPU"  # the device of the stage that uses it
    assert not dialog.warning.isHidden()
    assert dialog.warning.text().startswith("llm: warning: mlx-community/Qwen3-4B-Instruct-2507-bf16 "
                                            "is bf16 (8.1 GB) on MLX, expected slow")
    assert "mlx-community/Qwen3-4B-Instruct-2507-4bit" in dialog.warning.text()
    column = list(dialog.table.horizontalHeaderItem(c).text()
                  for c in range(dialog.table.columnCount())).index("Expected speed")
    assert "not measured" in dialog.table.item(0, column).toolTip()
    dialog.done(0)


def test_no_warning_for_a_quantized_llm(qtbot, caches):
    four_bit = _placement("llm", "mlx-community/Qwen3-4B-Instruct-2507-4bit", "mlx-lm", device="mlx")
    dialog = _open(qtbot, _controller(four_bit, loaded=("llm",)))
    assert dialog.warning.isHidden() and dialog.warning.text() == ""
    dialog.done(0)


def test_remove_asks_first_then_deletes(qtbot, caches, monkeypatch):
    dialog = _open(qtbot)
    asked = []
    monkeypatch.setattr(dialog, "confirm_remove", lambda model: asked.append(model.name) or False)
    assert dialog.select("org/small-llm")
    assert dialog.remove.isEnabled()
    dialog.remove.click()
    assert asked == ["org/small-llm"]
    assert (caches / "models--org--small-llm").exists()  # cancelled: still there
    monkeypatch.setattr(dialog, "confirm_remove", lambda model: True)
    assert dialog.remove_selected() is True
    qtbot.waitUntil(lambda: not dialog.busy and "org/small-llm" not in _rows(dialog), timeout=10000)
    assert not (caches / "models--org--small-llm").exists()
    assert "Removed org/small-llm" in dialog.status.text()
    assert dialog.total.text().startswith("2 models")
    dialog.done(0)


def test_remove_refuses_a_model_a_loaded_stage_uses(qtbot, caches, monkeypatch):
    dialog = _open(qtbot, _controller(_placement("stt", "org/tiny-stt", "faster-whisper")))
    monkeypatch.setattr(dialog, "confirm_remove", lambda model: pytest.fail("must not ask"))
    dialog.select("org/tiny-stt")
    assert dialog.remove_selected() is False
    assert "loaded stt stage" in dialog.status.text()
    assert (caches / "models--org--tiny-stt").exists()
    dialog.done(0)


def test_download_offers_missing_models_and_fails_clearly_offline(qtbot, caches, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    llm = _placement("llm", "org/not-here")
    assert [d.repo_id for d in wanted_downloads([llm, _placement("stt", "org/tiny-stt")],
                                                None)] == ["org/not-here", "org/tiny-stt"]
    dialog = _open(qtbot, _controller(llm, _placement("stt", "org/tiny-stt")))
    assert [d.repo_id for d in dialog.wanted()] == ["org/not-here"]
    download = dialog.open_download()
    assert download is not None
    download.start()
    qtbot.waitUntil(lambda: download.state is DownloadState.FAILED, timeout=20000)
    assert "HF_HUB_OFFLINE" in download.message
    dialog.done(0)
    assert not download.running


def test_without_an_engine_download_says_what_to_do(qtbot, caches):
    dialog = _open(qtbot)
    assert dialog.open_download() is None and "Load the models first" in dialog.status.text()
    dialog.done(0)


def test_every_control_has_a_name_and_a_tab_stop(qtbot, caches):
    dialog = _open(qtbot)
    dialog.show()
    qtbot.waitExposed(dialog)
    dialog.select("org/small-llm")
    widgets = [dialog.table, *(b for b in dialog.findChildren(QAbstractButton)
                               if b.isVisibleTo(dialog) and b.window() is dialog
                               and not isinstance(b.parent(), QTableWidget))]
    assert len(widgets) == 5
    for widget in widgets:
        assert widget.accessibleName(), f"{widget!r} has no accessible name"
        assert widget.focusPolicy() & Qt.FocusPolicy.TabFocus
    dialog.table.setFocus()
    reached = set()
    for _ in range(12):
        reached.add(dialog.focusWidget())
        dialog.focusNextChild()
    assert all(w in reached for w in widgets if w.isEnabled())
    dialog.done(0)


class _Window(QMainWindow):
    """What ``install`` needs of MainWindow (``WindowApi``): a File menu with Quit, no engine."""

    def __init__(self) -> None:
        super().__init__()
        self.controller = None
        self.file_menu = QMenu("File", self)
        self.file_menu.addAction("History")
        self._quit_separator = self.file_menu.addSeparator()
        self.file_menu.addAction("Quit")

    @property
    def widget(self) -> QMainWindow:
        return self

    def add_file_action(self, action) -> None:
        self.file_menu.insertAction(self._quit_separator, action)


def test_install_adds_models_to_the_file_menu(qtbot, caches):
    window = _Window()
    qtbot.addWidget(window)
    models = install(window)
    names = [a.text() for a in window.file_menu.actions()]
    assert names.count("Models…") == 1 and names.index("Models…") < names.index("Quit")
    assert models.dialog is None
    models.action.trigger()
    dialog = models.dialog
    assert dialog is not None
    qtbot.waitUntil(lambda: dialog.scan is not None, timeout=10000)
    assert dialog.isVisible()
    assert models.show() is dialog  # raised, not a second one
    dialog.done(0)
