"""What the window offers about its models: larger ones to download while bundled ones
run (the status line's "Get larger models…", and the offline notice in the stack badge's
tooltip, with what ``auto`` picked by budget, why and the runner-up), and, after a model
failed to load, loading that stage on another usable device (the banner's button)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QPushButton

from app.onboarding.downloads import ModelDownloadDialog, hub_downloads, offline_notice
from app.onboarding.load_recovery import other_devices
from app.onboarding.offer_rows import choice_lines
from engine.backends import BackendRegistry
from engine.errors import ParleyError
from engine.runtime.failures import ModelLoadError

if TYPE_CHECKING:
    from app.core.window_api import WindowApi


class ModelOffers(QObject):
    """The offers of ``window`` (see the module doc), kept in step with its placements."""

    def __init__(self, window: WindowApi) -> None:
        super().__init__(window.widget)
        self.window = window
        self.downloads: list = []  # the HubDownloads that would replace the bundled models
        self.devices: list = []  # discovery's DeviceInfos
        self.backends = BackendRegistry()
        self.models_button = QPushButton("Get larger models…")
        self.models_button.setObjectName("linkButton")
        self.models_button.clicked.connect(self.download)
        window.add_status_widget(self.models_button)
        self.models_button.hide()
        window.placements_shown.connect(self._placements_shown)
        window.controller.devices_found.connect(self._devices_found)
        window.controller.apply_failed.connect(self._load_failed)

    def _devices_found(self, devices) -> None:
        self.devices = list(devices)

    def _placements_shown(self, snap) -> None:
        engine = self.window.controller.engine
        placements = list(engine.placements.values()) if engine is not None else []
        # What auto picked by budget, why and the runner-up (or that nothing is measured).
        picked = "\n".join(choice_lines(placements))
        notice = "\n\n".join(x for x in (offline_notice(snap.placements), picked) if x) or None
        self.window.stage_status.set_notice(notice)
        self.downloads = hub_downloads(placements)
        self.models_button.setVisible(bool(self.downloads))
        self.models_button.setToolTip(notice or "")

    def download(self) -> None:
        """Fetch the hub models that would replace the bundled ones, then load them."""
        dialog = ModelDownloadDialog(self.downloads, self.window.widget)
        dialog.finished_download.connect(lambda ok: ok and self._reload())
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()

    def _reload(self) -> None:
        self.window.banner.show_message("The models were downloaded; loading them now.", "info")
        self.window.controller.rebuild()  # auto now finds them in the cache

    def _load_failed(self, failure) -> None:  # an app.core.background.Failure
        """The banner offers to load the failed stage on another usable device."""
        error = failure.error
        if not isinstance(error, ModelLoadError):
            return
        choices = other_devices(error, self.devices, self.backends)
        if not choices:
            return
        stage, device = error.stage, choices[0]

        def retry() -> None:
            try:
                config = self.window.requested_config.with_overrides({f"{stage}.device": device})
            except ParleyError as exc:
                self.window.banner.show_message(f"Could not move the {stage} model to {device}: {exc}")
                return
            self.window.apply_config(config, f"Loading the {stage} model on {device}…")

        self.window.banner.offer(f"Load the {stage} model on {device}", retry)
