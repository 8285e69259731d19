"""File > Models…: the models on disk, their size, precision and expected speed, which
stage uses them; download, remove.

The table lists the Hugging Face hub cache, Parley's own cache and the models bundled in
installed packages (``engine.models.model_cache``). Scanning a large cache and deleting a
large model take seconds, so both run on a latest-wins lane (``app.core.background``);
the window's buttons wait for it, and closing the window joins it. Download… fetches the
hub models the loaded engine would rather use but are missing, through the first-run
``ModelDownloadDialog``. Remove refuses a model a loaded stage holds right now and names
that stage.

The precision and the expected speed class come from ``engine.models.model_catalog``
(the table of known models, else the model's name, config and weight size), for the
device the stage using it runs on, else the device its format is for. A full-precision
LLM that a loaded stage runs on Apple Silicon gets a warning line above the status.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QHBoxLayout, QHeaderView, QLabel, QPushButton,
                               QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from app.core.background import Failure, JobKind, LatestLane
from app.core.widgets import confirm
from app.onboarding.downloads import HUB_PATTERNS, HubDownload, ModelDownloadDialog, hub_downloads
from engine.models.model_cache import (BUNDLED, HUB, CachedModel, ModelScan, ModelUse, engine_uses,
                                        human_bytes, remove_model, scan_models, uses_of)
from engine.models.model_catalog import ModelProfile, full_precision_warning, profile, snapshot_folder

if TYPE_CHECKING:
    from app.core.controller import EngineController
    from app.core.window_api import WindowApi
    from engine.engine import Engine

COLUMNS = ("Name", "Kind", "Size", "Precision", "Expected speed", "Last used", "Used by")
_ROLE = Qt.ItemDataRole.UserRole
_SPEED_TIP = ("Expected from the size of the weights on this kind of device (each generated "
              "token reads every weight); not measured on this computer.")


def profile_models(scan: ModelScan, placements: list[Any]) -> tuple[dict[str, ModelProfile], list[str]]:
    """Each scanned model's profile (by name), for the devices of the placements that use
    it, and the full-precision warnings of the placed LLMs. Reads small files: run it off
    the GUI thread."""
    kinds = {p.stage: p.device.kind for p in placements if p.device.kind != "remote"}
    profiles = {}
    for model in scan.models:
        folder = snapshot_folder(model.name, scan.hub_cache) if model.kind == HUB else model.path
        devices = tuple(dict.fromkeys(kinds[s] for s in model.used_by if s in kinds)) or None
        profiles[model.name] = profile(model.name, folder=folder, size_bytes=model.size_bytes,
                                       devices=devices)
    warnings = [w for p in placements if p.stage in kinds
                if (w := full_precision_warning(p.stage, p.backend, p.device.kind, str(p.model),
                                                scan.hub_cache))]
    return profiles, warnings


def wanted_downloads(placements: list[Any], scan: ModelScan | None) -> list[HubDownload]:
    """The hub repos the engine's ``placements`` would use that the hub cache lacks: the
    preferred models that replace bundled ones, and hub models named but not cached."""
    cached = {m.name for m in (scan.models if scan else ()) if m.kind == HUB}
    out = [d for d in hub_downloads(placements) if d.repo_id not in cached]
    for p in placements:
        model = str(p.model)
        repo, _, path = model.partition(":")
        if (p.bundled or p.endpoint or repo in cached or repo.count("/") != 1
                or Path(model).expanduser().exists() or any(d.repo_id == repo for d in out)):
            continue
        patterns = (path, path + ".json") if path else HUB_PATTERNS.get(p.backend)
        out.append(HubDownload(p.stage, repo, patterns))
    return out


class ModelManagerDialog(QDialog):
    """The models on disk in a table, with a total; Download…, Remove…, Refresh.

    ``controller``: the app's EngineController (its ``engine`` and ``config`` say which
    stage uses what), or None. ``bundled``: list the models of installed packages too.
    """

    def __init__(self, controller: EngineController | None = None, parent: QWidget | None = None, *,
                 bundled: bool = True) -> None:
        super().__init__(parent)
        self.setObjectName("modelManager")
        self.setWindowTitle("Models")
        self.resize(860, 480)
        self.controller = controller
        self.scan: ModelScan | None = None
        self.download_dialog: ModelDownloadDialog | None = None
        self._bundled = bundled
        self._lane = LatestLane(self, "parley-model-cache")
        self._after_scan = ""  # what the status line says once the next scan is shown

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("modelTable")
        self.table.setAccessibleName("Models on disk")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setTabKeyNavigation(False)  # Tab leaves the table for the buttons
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in range(1, len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.table.itemSelectionChanged.connect(self._sync_buttons)
        self.total = QLabel("")
        self.total.setObjectName("modelTotal")
        self.warning = QLabel("")
        self.warning.setObjectName("modelWarning")
        self.warning.setWordWrap(True)
        self.warning.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.warning.setVisible(False)
        self.profiles: dict[str, ModelProfile] = {}
        self.status = QLabel("")
        self.status.setObjectName("modelStatus")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.download = self._button("Download…", "Download missing models", self.open_download)
        self.remove = self._button("Remove…", "Remove the selected model", self.remove_selected)
        self.refresh = self._button("Refresh", "Scan the model caches again", self.rescan)
        self.close_button = self._button("Close", "Close the models window", self.accept)
        buttons = QHBoxLayout()
        buttons.addWidget(self.total, 1)
        for button in (self.download, self.remove, self.refresh, self.close_button):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.warning)
        layout.addWidget(self.status)
        layout.addLayout(buttons)
        order = (self.table, self.download, self.remove, self.refresh, self.close_button)
        for first, second in itertools.pairwise(order):
            QWidget.setTabOrder(first, second)
        self.rescan()

    def _button(self, text: str, name: str, slot: Callable[[], Any]) -> QPushButton:
        button = QPushButton(text)
        button.setAccessibleName(name)
        button.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        button.clicked.connect(lambda _checked=False: slot())
        return button

    # ------------------------------------------------------------------ what is in use
    def uses(self) -> list[ModelUse]:
        """Which stage names which model: the loaded engine's, else the config's."""
        engine = self._engine()
        if engine is not None:
            return engine_uses(engine)
        return uses_of(config=self.controller.config if self.controller is not None else None)

    def _engine(self) -> Engine | None:
        """The controller's loaded engine (None without one, or without a controller)."""
        return self.controller.engine if self.controller is not None else None

    def placements(self) -> list[Any]:
        """The loaded engine's placements (none without an engine)."""
        engine = self._engine()
        return [] if engine is None else list(engine.placements.values())

    def wanted(self) -> list[HubDownload]:
        """The missing hub models the loaded engine would use (none without an engine)."""
        engine = self._engine()
        return [] if engine is None else wanted_downloads(list(engine.placements.values()),
                                                          self.scan)

    # ------------------------------------------------------------------ background
    @property
    def busy(self) -> bool:
        """True while a scan or a removal runs (or its result is on the way)."""
        return self._lane.busy

    def _run(self, kind: JobKind, what: str, job: Callable[[], Any], then: Callable[[Any], None]) -> None:
        if self.busy:
            return
        self.status.setText(what)
        self._lane.call(kind, job, lambda result: self._finished(then, result), self._failed)
        self._sync_buttons()

    def _finished(self, then: Callable[[Any], None], result: Any) -> None:
        then(result)
        self._sync_buttons()

    def _failed(self, failure: Failure) -> None:
        self.status.setText(failure.message)
        self._sync_buttons()

    def wait(self, timeout: float | None = None) -> bool:
        """Join the lane's thread; True if none is running."""
        return self._lane.join(30.0 if timeout is None else timeout)

    # ------------------------------------------------------------------ scanning
    def rescan(self) -> None:
        """Scan the caches in the background and fill the table."""
        uses, bundled, placements = self.uses(), self._bundled, self.placements()

        def job() -> tuple[ModelScan, dict[str, ModelProfile], list[str]]:
            scan = scan_models(uses, bundled=bundled)
            return (scan, *profile_models(scan, placements))

        self._run(JobKind.SCAN, "Scanning the model caches…", job, self._show_scan)

    def _show_scan(self, result: tuple[ModelScan, dict[str, ModelProfile], list[str]]) -> None:
        scan, self.profiles, warnings = result
        self.scan = scan
        self.warning.setText("\n".join(warnings))
        self.warning.setVisible(bool(warnings))
        self.table.setRowCount(0)
        for model in scan.models:
            row = self.table.rowCount()
            self.table.insertRow(row)
            when = (datetime.fromtimestamp(model.last_used).strftime("%Y-%m-%d")
                    if model.last_used else "")
            used = ", ".join(f"{s} (loaded)" if s in model.loaded_by else s
                             for s in model.used_by)
            found = self.profiles.get(model.name)
            precision = (found.precision if found else "") or "unknown"
            speed = found.speed_text() if found else "unknown"
            for column, text in enumerate((model.name, model.kind, human_bytes(model.size_bytes),
                                           precision, speed, when, used)):
                item = QTableWidgetItem(text)
                item.setData(_ROLE, model)
                item.setToolTip(_SPEED_TIP + (f" {found.about}." if found and found.about else "")
                                if column == 4 else str(model.path))
                if column == 2:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, column, item)
        self.total.setText(f"{len(scan.models)} models, {human_bytes(scan.total_bytes)} on disk")
        notes = [f"Hub cache: {scan.hub_cache}", f"Parley cache: {scan.parley_cache}",
                 *scan.warnings]
        self.status.setText(self._after_scan or " · ".join(notes))
        self._after_scan = ""

    # ------------------------------------------------------------------ actions
    def selected(self) -> CachedModel | None:
        """The model of the selected row, or None."""
        rows = self.table.selectionModel().selectedRows()
        item = self.table.item(rows[0].row(), 0) if rows else None
        return None if item is None else item.data(_ROLE)

    def select(self, name: str) -> bool:
        """Select the row of the model called ``name``."""
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item is not None and item.text() == name:
                self.table.selectRow(row)
                return True
        return False

    def confirm_remove(self, model: CachedModel) -> bool:
        """Ask before deleting; tests replace this to answer."""
        return confirm(self, "Remove model",
                       f"Delete {model.name} ({human_bytes(model.size_bytes)}) from {model.path}?\n\n"
                       "A stage that needs it will download or convert it again.")

    def remove_selected(self) -> bool:
        """Remove the selected model after confirmation, in the background; False when
        refused (bundled, in use by a loaded stage) or cancelled."""
        model = self.selected()
        if model is None or self.busy:
            return False
        if model.kind == BUNDLED:
            self.status.setText(f"{model.name} is bundled in the package {model.source}; "
                                "it cannot be removed here (pip uninstall that package).")
            return False
        if model.loaded_by:
            stages = ", ".join(model.loaded_by)
            self.status.setText(f"Cannot remove {model.name}: the loaded {stages} stage uses it. "
                                f"Switch {stages} to another model in Settings first.")
            return False
        if not self.confirm_remove(model):
            return False
        self._run(JobKind.REMOVE, f"Removing {model.name}…", lambda: remove_model(model),
                  lambda freed: self._removed(model, freed))
        return True

    def _removed(self, model: CachedModel, freed: int) -> None:
        self.rescan()
        self._after_scan = f"Removed {model.name} ({human_bytes(freed)} freed)."

    def open_download(self) -> ModelDownloadDialog | None:
        """Open the download dialog for the missing models (None when nothing is missing)."""
        wanted = self.wanted()
        if not wanted:
            self.status.setText("Every hub model the loaded engine wants is already on disk."
                                if self._engine() is not None else
                                "Load the models first: downloads follow the loaded engine's "
                                "placements.")
            return None
        self.download_dialog = ModelDownloadDialog(wanted, self)
        self.download_dialog.finished_download.connect(lambda ok: ok and self.rescan())
        self.download_dialog.show()
        return self.download_dialog

    def _sync_buttons(self) -> None:
        model = self.selected()
        self.remove.setEnabled(not self.busy and model is not None and model.removable)
        self.refresh.setEnabled(not self.busy)
        self.download.setEnabled(not self.busy)

    def done(self, result: int) -> None:
        if self.download_dialog is not None:
            self.download_dialog.cancel()
            self.download_dialog.wait(10)
        self._lane.drop()  # a result still on its way is dropped
        self.wait(30)
        super().done(result)


class ModelManager:
    """File > Models… of a window: ``action``, and ``dialog``, the manager it last opened
    (None before the first)."""

    def __init__(self, window: WindowApi) -> None:
        self._window = window
        self.dialog: ModelManagerDialog | None = None
        self.action = QAction("Models…", window.widget)
        self.action.setObjectName("modelsAction")
        self.action.setStatusTip("The models on disk: sizes, which stage uses them; download, remove")
        self.action.triggered.connect(lambda _checked=False: self.show())
        window.add_file_action(self.action)

    def show(self) -> ModelManagerDialog:
        """Show the manager (raising the one open; a closed one rescans from scratch)."""
        dialog = self.dialog
        if dialog is None or not dialog.isVisible():
            if dialog is not None:
                dialog.deleteLater()
            dialog = self.dialog = ModelManagerDialog(self._window.controller, self._window.widget)
        dialog.show()
        dialog.raise_()
        dialog.activateWindow()
        return dialog


def install(window: WindowApi) -> ModelManager:
    """Add File > Models… to ``window`` (above Quit); returns the ``ModelManager``."""
    return ModelManager(window)
