"""The main window: listen/stop, push-to-talk, the mic meter, the conversation, live
meters and graphs, settings, the realtime server (Server tab), device layouts compared
(Benchmark tab), the status line and the error banner.

The GUI thread never waits on the engine: engine work goes through EngineController (a
background worker), engine events arrive as queued signals from the EventBridge, and the
10 Hz timer draws the latest snapshot that the controller's SnapshotPoller took on its
own thread (reading it never calls into the engine).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QApplication, QCheckBox, QFileDialog, QFrame, QHBoxLayout, QLabel, QLineEdit,
                               QMainWindow, QPlainTextEdit, QProgressBar, QPushButton, QScrollArea, QSplitter,
                               QTabWidget, QVBoxLayout, QWidget)

from app.window.accessibility import chain, name_unnamed
from app.window.appearance import ThemeController
from app.assistant.panel import install as install_assistant
from app.bench.controller import BenchController
from app.bench.panel import BenchPanel
from app.core.bridge import EventBridge
from app.core.controller import TRANSITIONS, ControllerMode, ControllerState, EngineController
from app.conversation.view import ConversationView
from app.conversation.global_hotkey import GlobalPushToTalk
from app.performance.graphs import GraphsPanel
from app.onboarding.load_recovery import other_devices
from app.performance.meters import LevelMeter, MetersPanel
from app.onboarding.model_manager import install as install_model_manager
from app.server.controller import ServerController
from app.server.panel import ServerPanel
from app.core.saved_settings import save_config, set_ui_value, ui_value
from app.settings.panel import SettingsPanel
from app.onboarding.device_check import install as install_setup_check
from app.window.shortcuts import install_shortcuts
from app.conversation.thinking_sound import ThinkingSound
from app.window.status_line import Banner, StageStatus, StatePill
from app.conversation.stop_talking import StopTalkingButton
from app.core.window_state import save_window_state
from engine.config import STAGES, EngineConfig
from engine.errors import ModelLoadError, ParleyError

POLL_MS = 100  # meters and graphs at 10 Hz


class MainWindow(QMainWindow):
    """Parley's window. ``autoload`` loads the models of ``config`` at once (in the background)."""

    def __init__(self, config: EngineConfig, settings, autoload: bool = True,
                 notes: list[str] | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.setWindowTitle("Parley")
        self.setMinimumSize(1024, 640)
        self.bridge = EventBridge(self)
        self.controller = EngineController(config, self.bridge, self)
        # The realtime server: its own engine on the desktop's models (shared, not reloaded).
        self.server = ServerController(lambda: self.controller.config, self.controller.registry, self)
        # The Benchmark tab: layouts compared on engines (and models) of its own.
        self.bench = BenchController(
            lambda: self.controller.config, self,
            blocked=lambda: "the models are loading" if self.controller.worker.busy else None)
        self._filtering = False  # the push-to-talk key filter is installed
        self._save_on_load = False  # the next loaded config came from Apply
        self._drawn = None  # the snapshot last recorded by the graphs
        self._metered = None  # the snapshot last shown by the meters
        self._shown_placements: tuple = ((), ())  # (placements, notes) in the status line
        self._build(config)
        self._connect()
        self._install_reach()
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self.tick)
        self._timer.timeout.connect(self._tick_server)
        self._timer.start()
        self.closed = False
        self.shutdown_stuck: list[str] = []
        for note in notes or []:
            self.banner.show_message(note, "info")
        self.controller.discover()
        self._requested: EngineConfig | None = config
        if autoload:
            self.controller.apply(config)
        install_setup_check(self, autoload)  # Help menu; opens itself on the first start

    # ------------------------------------------------------------------ layout
    def _build(self, config: EngineConfig) -> None:
        central = QWidget()
        central.setObjectName("central")
        root = QVBoxLayout(central)
        root.setContentsMargins(0, 0, 0, 0)
        root.setSpacing(0)
        root.addWidget(self._header())
        body = QVBoxLayout()
        body.setContentsMargins(16, 10, 16, 8)
        body.setSpacing(8)
        self.banner = Banner()
        body.addWidget(self.banner)
        body.addWidget(self._load_row())
        self.tabs = QTabWidget()
        self.tabs.setObjectName("mainTabs")
        self.tabs.tabBar().setAccessibleName("Main tabs")
        self.tabs.setDocumentMode(True)
        self.tabs.tabBar().setDrawBase(False)
        self.conversation = ConversationView()
        self.meters = MetersPanel()
        meters_scroll = QScrollArea()
        meters_scroll.setObjectName("metersScroll")
        meters_scroll.setWidget(self.meters)
        meters_scroll.setWidgetResizable(True)
        meters_scroll.setFrameShape(QFrame.Shape.NoFrame)
        meters_scroll.setMinimumWidth(360)
        split = self.split = QSplitter(Qt.Orientation.Horizontal)
        split.setObjectName("conversationSplit")
        split.addWidget(self.conversation)
        split.addWidget(meters_scroll)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        split.setSizes([840, 380])
        split.setChildrenCollapsible(False)
        self.graphs = GraphsPanel()
        self.panel = SettingsPanel(config)
        self.conversation_page = self._page(split)
        self.graphs_page = self._page(self.graphs)
        self.settings_page = self._page(self.panel)
        self.server_panel = ServerPanel(self.server, self.settings)
        self.server_page = self._page(self.server_panel)
        self.bench_panel = BenchPanel(self.bench, lambda: self.controller.config)
        self.bench_page = self._page(self.bench_panel)
        self.tabs.addTab(self.conversation_page, "Conversation")
        self.tabs.addTab(self.graphs_page, "Performance")
        self.tabs.addTab(self.settings_page, "Settings")
        self.tabs.addTab(self.server_page, "Server")
        self.tabs.addTab(self.bench_page, "Benchmark")
        body.addWidget(self.tabs, 1)
        root.addLayout(body, 1)
        self.setCentralWidget(central)
        self.stage_status = StageStatus()
        self.statusBar().addWidget(self.stage_status, 1)
        self.models_button = QPushButton("Get larger models…")
        self.models_button.setObjectName("linkButton")
        self.models_button.clicked.connect(self._download_models)
        self.models_button.hide()
        self.statusBar().addPermanentWidget(self.models_button)
        self.statusBar().setSizeGripEnabled(False)
        self.statusBar().setContentsMargins(6, 0, 14, 0)
        self._menus()

    @staticmethod
    def _page(widget: QWidget) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 12, 0, 0)
        layout.addWidget(widget)
        return page

    def _header(self) -> QFrame:
        header = QFrame()
        header.setObjectName("header")
        row = self.header_row = QHBoxLayout(header)
        row.setContentsMargins(16, 10, 16, 10)
        row.setSpacing(12)
        title = QLabel("Parley")
        title.setObjectName("appTitle")
        self.listen_button = QPushButton("Listen")
        self.listen_button.setObjectName("listenButton")
        self.listen_button.setToolTip("Start or stop listening to the microphone (Ctrl+L)")
        self.interrupt_button = QPushButton("Interrupt")
        self.interrupt_button.setToolTip("Cut off the reply in progress (Esc)")
        # Shown only while a reply is heard: the way to silence Parley, always in reach.
        self.stop_talking = StopTalkingButton(lambda: self.controller.interrupt())
        self.ptt_check = QCheckBox("Push to talk")
        self.ptt_check.setToolTip("Only listen while the talk key (or the Hold to talk button) is held")
        self.talk_button = QPushButton("Hold to talk")
        self.talk_button.setObjectName("talkButton")
        self.level = LevelMeter()
        self.level.setMinimumWidth(260)
        self.pill = StatePill()
        row.addWidget(title)
        row.addSpacing(8)
        row.addWidget(self.listen_button)
        row.addWidget(self.interrupt_button)
        row.addWidget(self.stop_talking)
        row.addSpacing(12)
        row.addWidget(self.ptt_check)
        row.addWidget(self.talk_button)
        row.addStretch(1)
        # Echo cancellation, live: whether it runs and how much of the reply's echo it
        # removes (from the snapshot); empty while nothing plays to a speaker.
        self.echo_label = QLabel("")
        self.echo_label.setObjectName("hint")
        self.echo_label.setAccessibleName("Echo cancellation")
        row.addWidget(self.echo_label)
        row.addWidget(self.level)
        row.addSpacing(8)
        row.addWidget(self.pill)
        return header

    def _load_row(self) -> QFrame:
        self.load_row = QFrame()
        self.load_row.setObjectName("loadRow")
        row = QHBoxLayout(self.load_row)
        row.setContentsMargins(12, 6, 12, 6)
        self.load_label = QLabel("Loading models…")
        self.load_label.setObjectName("loadLabel")
        self.load_bar = QProgressBar()
        self.load_bar.setRange(0, 1000)
        self.load_bar.setTextVisible(False)
        self.load_bar.setFixedWidth(280)
        row.addWidget(self.load_label, 1)
        row.addWidget(self.load_bar)
        self.load_row.hide()
        return self.load_row

    def _menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.listen_action = QAction("Listen / Stop", self, shortcut=QKeySequence("Ctrl+L"))
        self.listen_action.triggered.connect(self.toggle_listening)
        recording = QAction("Converse with a recording…", self, shortcut=QKeySequence("Ctrl+O"))
        recording.triggered.connect(self._choose_recording)
        clear = QAction("Clear conversation", self)
        clear.triggered.connect(self.conversation.clear)
        quit_action = QAction("Quit", self, shortcut=QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        interrupt = self.interrupt_action = QAction("Interrupt reply", self, shortcut=QKeySequence("Esc"))
        interrupt.triggered.connect(self.stop_talking.stop)
        self.history_action = QAction("Conversation history…", self,
                                      shortcut=QKeySequence("Ctrl+H"))
        self.history_action.triggered.connect(self.show_history)
        for action in (self.listen_action, interrupt, recording, clear, self.history_action):
            file_menu.addAction(action)
        file_menu.addSeparator()
        file_menu.addAction(quit_action)
        view = self.menuBar().addMenu("&View")
        for i, name in enumerate(("Conversation", "Performance", "Settings", "Server",
                                  "Benchmark")):
            action = QAction(name, self, shortcut=QKeySequence(f"Ctrl+{i + 1}"))
            action.triggered.connect(lambda _c=False, i=i: self.tabs.setCurrentIndex(i))
            view.addAction(action)
        help_menu = self.menuBar().addMenu("&Help")
        #: The menus by name, for the features that add their actions (``install(window)``).
        self.menus = {"file": file_menu, "view": view, "help": help_menu}

    # ------------------------------------------------------------------ wiring
    def _connect(self) -> None:
        c, b, p = self.controller, self.bridge, self.panel
        b.user_speaking.connect(self.conversation.on_user_speaking)
        b.partial_transcript.connect(self.conversation.on_partial)
        b.final_transcript.connect(self.conversation.on_final)
        b.reply_text.connect(self.conversation.on_reply)
        b.turn_cancelled.connect(self.conversation.on_cancelled)
        b.turn_cancelled.connect(self.stop_talking.turn_cancelled)
        b.turn_finished.connect(self.conversation.on_finished)
        b.engine_error.connect(lambda stage, msg: self.banner.show_message(f"{stage} stage: {msg}"))
        c.state_changed.connect(self._state_changed)
        c.load_started.connect(self._load_started)
        c.apply_started.connect(self._apply_started)
        c.applied.connect(self._applied)
        c.load_progress.connect(self._load_progress)
        c.engine_changed.connect(self._engine_changed)
        c.apply_failed.connect(self._apply_failed)
        c.error.connect(self.banner.show_message)
        c.devices_found.connect(p.set_devices)
        c.devices_found.connect(self.bench_panel.set_devices)
        self.bench_panel.use_layout.connect(self._use_layout)
        c.audio_devices_found.connect(p.set_audio_devices)
        c.audio_switched.connect(self._audio_switched)
        c.audio_switch_failed.connect(self._audio_switch_failed)
        p.apply_requested.connect(self._apply)
        p.audio_device_chosen.connect(c.switch_audio)
        p.refresh_requested.connect(lambda: c.discover(refresh_audio=True))
        p.ptt_key_changed.connect(self._ptt_key_changed)
        self.listen_button.clicked.connect(self.toggle_listening)
        self.interrupt_button.clicked.connect(self.stop_talking.stop)
        self.ptt_check.toggled.connect(self._ptt_toggled)
        self.talk_button.pressed.connect(lambda: self._talk(True))
        self.talk_button.released.connect(lambda: self._talk(False))
        self.ptt_key = ui_value(self.settings, "ptt_key", "Space")
        self.panel.ptt_key.setCurrentText(self.ptt_key)
        self.ptt_check.setChecked(ui_value(self.settings, "push_to_talk", False))
        self._ptt_toggled(self.ptt_check.isChecked())
        self._state_changed(c.state)

    def _install_reach(self) -> None:
        """Themes, shortcuts, the system-wide talk key, tab order and accessible names;
        the Assistant tab and the model manager (named with the rest)."""
        install_assistant(self)
        assistant = QAction("Assistant", self, shortcut=QKeySequence("Ctrl+6"))
        assistant.triggered.connect(lambda: self.tabs.setCurrentWidget(self.assistant_page))
        self.menus["view"].addAction(assistant)
        install_model_manager(self)
        self.thinking_sound = ThinkingSound(self)
        self.appearance = ThemeController(self, self.settings)
        install_shortcuts(self)
        self.global_ptt = GlobalPushToTalk(self)
        self.header_row.insertWidget(self.header_row.indexOf(self.talk_button) + 1, self.global_ptt.check)
        chain(self.listen_button, self.interrupt_button, self.stop_talking, self.ptt_check,
              self.talk_button, self.global_ptt.check, self.tabs.tabBar())
        name_unnamed(self)
        # Rows added later (benchmark layouts, server clients) are named when shown.
        self.tabs.currentChanged.connect(lambda _i: name_unnamed(self.tabs.currentWidget()))

    # ------------------------------------------------------------------ controls
    def toggle_listening(self) -> None:
        """Listen when idle, stop when listening."""
        if self.controller.mode is not ControllerMode.IDLE:
            self.controller.stop_listening()
        else:
            self.controller.start_listening()

    def _choose_recording(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Converse with a recording", "",
                                              "Audio (*.wav *.flac *.mp3 *.ogg);;All files (*)")
        if path:
            self.controller.start_recording(path)

    def _state_changed(self, state: ControllerState) -> None:
        self.pill.set_state(state)
        c = self.controller
        running = c.mode is not ControllerMode.IDLE or state is ControllerState.LISTENING
        busy = state in TRANSITIONS
        self.listen_button.setText("Stop" if running else "Listen")
        self.listen_button.setProperty("listening", running)
        self.listen_button.style().unpolish(self.listen_button)
        self.listen_button.style().polish(self.listen_button)
        # While a new engine is built, the current one is about to be replaced.
        self.listen_button.setEnabled(c.engine is not None and not busy and not c.building)
        self.listen_action.setEnabled(self.listen_button.isEnabled())
        self.interrupt_button.setEnabled(running and not busy)

    def _ptt_toggled(self, enabled: bool) -> None:
        # The talk key is watched application-wide, but only while push-to-talk is on:
        # a Python event filter sees every event, and each one costs the GIL.
        if enabled != self._filtering:
            app = QApplication.instance()
            (app.installEventFilter if enabled else app.removeEventFilter)(self)
            self._filtering = enabled
        self.controller.set_push_to_talk(enabled)
        self.talk_button.setVisible(enabled)
        self.talk_button.setText(f"Hold to talk ({self.ptt_key})")
        set_ui_value(self.settings, "push_to_talk", enabled)

    def _ptt_key_changed(self, key: str) -> None:
        self.ptt_key = key
        self.talk_button.setText(f"Hold to talk ({key})")
        set_ui_value(self.settings, "ptt_key", key)

    def _talk(self, pressed: bool) -> None:
        self.controller.set_talking(pressed)
        self.talk_button.setProperty("talking", pressed)
        self.talk_button.style().unpolish(self.talk_button)
        self.talk_button.style().polish(self.talk_button)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        """The push-to-talk key, held anywhere in the window except in text fields."""
        kind = event.type()
        if kind in (QEvent.Type.KeyPress, QEvent.Type.KeyRelease) and self.ptt_check.isChecked() \
                and not event.isAutoRepeat() and self.isActiveWindow() \
                and QKeySequence(event.key()).toString() == self.ptt_key \
                and not isinstance(QApplication.focusWidget(), (QLineEdit, QPlainTextEdit)):
            self._talk(kind == QEvent.Type.KeyPress)
            return True
        if kind == QEvent.Type.WindowDeactivate and obj is self and self.controller.talking:
            self._talk(False)  # a key released outside the window never arrives
        return super().eventFilter(obj, event)

    # ------------------------------------------------------------------ loading
    def _apply_started(self, _diff) -> None:
        self.panel.set_busy(True, "Applying…")

    def _load_started(self, _config) -> None:
        self.panel.set_busy(True, "Loading…")
        self.load_bar.setValue(0)
        self.load_label.setText("Loading models…")
        self.load_row.show()

    def _load_progress(self, stage: str, fraction, text: str) -> None:
        index = STAGES.index(stage) if stage in STAGES else 0
        overall = (index + (fraction if fraction is not None else 0.5)) / len(STAGES)
        self.load_bar.setValue(int(overall * 1000))
        self.load_label.setText(f"Loading models — {stage}: {text}")

    def _engine_changed(self, engine) -> None:
        self.load_row.hide()
        self.panel.set_busy(False)
        self.panel.set_config(self.controller.config)
        self.panel.show_message("Settings applied; models are loaded.", "ok")
        snap = self.controller.snapshot()  # taken by the load job, off this thread
        if snap is not None:
            self._show_placements(snap)
        self.graphs.new_engine()
        self.conversation.new_engine()
        self.stop_talking.new_engine()
        self._drawn = self._metered = None
        if self._save_on_load:
            self._save_on_load = False
            save_config(self.settings, self.controller.config)
        self._state_changed(self.controller.state)

    def _applied(self, diff) -> None:
        """Apply changed the running engine in place: the conversation goes on."""
        self.load_row.hide()
        self.panel.set_busy(False)
        self.panel.set_config(self.controller.config)
        summary = diff.summary()
        self.panel.show_message(f"{summary[:1].upper()}{summary[1:]}.", "ok")
        snap = self.controller.snapshot()  # taken by the Apply job, after the change
        if snap is not None:
            self._show_placements(snap)
        if self._save_on_load:
            self._save_on_load = False
            save_config(self.settings, self.controller.config)
        self._state_changed(self.controller.state)

    def _show_placements(self, snap) -> None:
        """The status line: the model and device of every stage, and what is bundled."""
        from app.onboarding.downloads import hub_downloads, offline_notice

        self._shown_placements = (snap.placements, snap.notes)
        self.stage_status.show_placements(snap.placements, snap.notes)
        notice = offline_notice(snap.placements)
        self.stage_status.stack.setToolTip("\n\n".join(x for x in (notice, *snap.notes) if x))
        engine = self.controller.engine
        self._downloads = hub_downloads(engine.placements.values()) if engine is not None else []
        self.models_button.setVisible(bool(self._downloads))
        self.models_button.setToolTip(notice or "")

    def _apply(self, config: EngineConfig) -> None:
        # Saved once it loads: invalid settings change nothing, on disk neither. A config
        # given with --config is used, but saved only when the user applies it.
        self._save_on_load = True
        self._requested = config  # what a failed load's "another device" starts from
        self.controller.apply(config)

    def _use_layout(self, overrides: dict) -> None:
        """The Benchmark tab's "Use this layout": the applied settings with its devices,
        applied (and saved once loaded) as the Settings tab's Apply does."""
        try:
            config = self.controller.config.with_overrides(overrides)
        except ParleyError as exc:
            self.banner.show_message(f"Could not use the layout: {exc}")
            return
        self.panel.show_message("Devices set from the Benchmark tab; applying…", "info")
        self._apply(config)

    def _download_models(self) -> None:
        """Fetch the hub models that would replace the bundled ones, then load them."""
        from app.onboarding.downloads import ModelDownloadDialog

        dialog = ModelDownloadDialog(self._downloads, self)
        dialog.finished_download.connect(lambda ok: ok and self._reload_after_download())
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()

    def _reload_after_download(self) -> None:
        self.banner.show_message("The models were downloaded; loading them now.", "info")
        self.controller.rebuild()  # auto now finds them in the cache

    def _apply_failed(self, message: str) -> None:
        self._save_on_load = False
        self.load_row.hide()
        self.panel.set_busy(False)
        self.panel.show_message(message, "error")
        error = getattr(message, "error", None)
        if self.controller.engine is None or isinstance(error, ModelLoadError):
            self.banner.show_message(f"The models could not be loaded: {message} "
                                     "Change them on the Settings tab.")
        if isinstance(error, ModelLoadError):
            self._offer_other_device(error)
        self._state_changed(self.controller.state)

    def _offer_other_device(self, error: ModelLoadError) -> None:
        """The banner offers to load the failed stage on another usable device."""
        choices = other_devices(error, self.panel.devices, self.panel.registry)
        if not choices or self._requested is None:
            return
        stage, device = error.stage, choices[0]

        def retry() -> None:
            try:
                config = self._requested.with_overrides({f"{stage}.device": device})
            except ParleyError as exc:
                self.banner.show_message(f"Could not move the {stage} model to {device}: {exc}")
                return
            self.panel.show_message(f"Loading the {stage} model on {device}…", "info")
            self._apply(config)

        self.banner.offer(f"Load the {stage} model on {device}", retry)

    def _audio_switched(self, kind: str, device: str) -> None:
        self.panel.set_applied(self.controller.config)  # unapplied edits stay
        save_config(self.settings, self.controller.config)
        self.panel.show_message(f"{'Microphone' if kind == 'input' else 'Speaker'} is now {device}.", "ok")

    def _audio_switch_failed(self, kind: str, kept: str, message: str) -> None:
        self.panel.set_audio_device(kind, kept)
        what = "microphone" if kind == "input" else "speaker"
        self.panel.show_message(f"Kept the {what} {kept!r}: {message}", "error")

    # ------------------------------------------------------------------ polling
    def tick(self) -> None:
        """The 10 Hz poll: the poller's latest snapshot feeds the visible meters and graphs.

        Reading it costs nothing (the poller took it on its own thread); a snapshot is
        recorded once, and hidden panels are not drawn.
        """
        c = self.controller
        c.poll()
        snap = c.snapshot()
        self.stop_talking.update_from(snap, c.mode is not ControllerMode.IDLE)
        if snap is None:
            return
        self.level.set_level(snap.input_level, c.mode is not ControllerMode.IDLE, c.mic_passing)
        echo = f"Echo cancellation: {snap.echo}" if snap.echo else ""
        if echo != self.echo_label.text():
            self.echo_label.setText(echo)
        if snap is not self._drawn:
            self._drawn = snap
            self.graphs.update_snapshot(snap)
            if (snap.placements, snap.notes) != self._shown_placements:
                self._show_placements(snap)  # an Apply reloaded a model
        current = self.tabs.currentWidget()
        if current is self.conversation_page:
            if snap is not self._metered:
                self._metered = snap
                self.meters.update_snapshot(snap)
        elif current is self.graphs_page:
            self.graphs.redraw()

    def show_history(self) -> None:
        """Open the conversation history: past conversations, reopened and exported."""
        from app.history.browser import HistoryDialog

        try:
            dialog = HistoryDialog(parent=self)
        except ParleyError as exc:
            self.banner.show_message(str(exc))
            return
        self.history_dialog = dialog
        dialog.open()

    def _tick_server(self) -> None:
        """The Server tab's tables, from the pool poller's latest reading; only when shown."""
        if self.tabs.currentWidget() is self.server_page:
            self.server_panel.tick()

    # ------------------------------------------------------------------ closing
    def closeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        """Stop the engine and join its threads, then let the window close."""
        if not self.closed:
            self.closed = True
            self._timer.stop()
            if self._filtering:
                QApplication.instance().removeEventFilter(self)
            self.global_ptt.hotkey.stop()
            save_window_state(self, self.settings)
            # Serving first: its clients' units run on models the desktop engine shares.
            self.thinking_sound.stop()
            self.shutdown_stuck = self.bench.shutdown()  # cancelled; its engines closed
            self.shutdown_stuck += self.server.shutdown()
            self.shutdown_stuck += self.controller.shutdown()
            self.settings.sync()
        event.accept()
