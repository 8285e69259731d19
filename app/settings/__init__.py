"""The Settings tab: a backend, model and device per stage, and every other setting."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.core.window_api import WindowApi
    from app.settings.panel import SettingsPanel

#: View > Settings…; the platform's Preferences key is added where it has another.
SETTINGS_KEY = "Ctrl+,"


def install(window: WindowApi, *,
            tool_support_shown: Callable[[Any], object] = lambda _support: None) -> SettingsPanel:
    """Add the Settings tab (and View > Settings…) to ``window`` and keep it in step with
    the controller: discovery fills its dropdowns, Apply goes through
    ``window.apply_config``, a device choice switches the device in place; loads, applies
    and switches report back on the panel. ``tool_support_shown(support)`` is told what the
    loaded engine says of its tools too (the conversation's tool rows). Returns the
    ``SettingsPanel``."""
    # Imported here, not at the top: ``app.settings.fields`` and the panel can then be
    # imported alone (the device check fills its combos with them).
    from app.core.saved_settings import save_config
    from app.settings.panel import SettingsPanel

    c = window.controller
    panel = SettingsPanel(c.config)
    page = window.add_tab("Settings", panel)
    _settings_action(window, page, panel)
    c.devices_found.connect(panel.set_devices)
    c.audio_devices_found.connect(panel.set_audio_devices)
    panel.apply_requested.connect(window.apply_config)
    panel.audio_device_chosen.connect(c.switch_audio)
    panel.refresh_requested.connect(lambda: c.discover(refresh_audio=True))
    window.config_requested.connect(lambda _config, note: note and panel.show_message(note, "info"))

    def done(message: str) -> None:
        panel.set_busy(False)
        panel.set_config(c.config)
        panel.show_message(message, "ok")

    def failed(failure) -> None:  # an app.core.background.Failure
        panel.set_busy(False)
        panel.show_message(str(failure), "error")

    def switched(kind: str, device: str) -> None:
        panel.set_applied(c.config)  # unapplied edits stay
        save_config(window.settings, c.config)
        panel.show_message(f"{'Microphone' if kind == 'input' else 'Speaker'} is now {device}.", "ok")

    def kept(kind: str, device: str, message: str) -> None:
        panel.set_audio_device(kind, device)
        what = "microphone" if kind == "input" else "speaker"
        panel.show_message(f"Kept the {what} {device!r}: {message}", "error")

    _follow_tool_support(window, panel, tool_support_shown)
    c.apply_started.connect(lambda _diff: panel.set_busy(True, "Applying…"))
    c.load_started.connect(lambda _config: panel.set_busy(True, "Loading…"))
    c.engine_changed.connect(lambda _engine: done("Settings applied; models are loaded."))
    c.applied.connect(lambda diff: done(_sentence(diff.summary())))
    c.apply_failed.connect(failed)
    c.audio_switched.connect(switched)
    c.audio_switch_failed.connect(kept)
    return panel


def _follow_tool_support(window: WindowApi, panel: SettingsPanel,
                         also: Callable[[Any], object]) -> None:
    """The Tools group (and ``also``: the conversation's tool rows, which name an MCP
    tool's server) follow what the loaded engine says of its tools, read on the
    controller's lane (after the load or Apply that changed them), never on the GUI thread."""
    c = window.controller

    def shown(support) -> None:
        panel.set_tool_support(support)
        also(support)

    def read(_what=None) -> None:
        c.run_with_engine("reading the tools", lambda engine: engine.tool_support(),
                          shown, lambda failure: panel.show_message(str(failure), "error"))

    c.engine_changed.connect(read)
    c.applied.connect(read)


def _sentence(text: str) -> str:
    return f"{text[:1].upper()}{text[1:]}."


def _settings_action(window: WindowApi, page: QWidget, panel: SettingsPanel) -> None:
    """View > Settings… (Ctrl+, and the platform's Preferences key; the app menu's item
    on macOS): the Settings tab, with the keyboard focus in its first control."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QAction, QKeySequence

    def show() -> None:
        window.show_tab(page)
        panel.global_device.setFocus(Qt.FocusReason.ShortcutFocusReason)

    action = QAction("Settings…", window.widget)
    action.setObjectName("settingsAction")
    keys = [QKeySequence(SETTINGS_KEY)]
    keys += [k for k in QKeySequence.keyBindings(QKeySequence.StandardKey.Preferences) if k not in keys]
    action.setShortcuts(keys)
    action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    action.setMenuRole(QAction.MenuRole.PreferencesRole)
    action.triggered.connect(show)
    window.menus["view"].addAction(action)
