"""The main window, the app's composition root.

The window owns what every feature shares: the header (Listen/Stop, Interrupt, the
microphone level, echo cancellation, the engine's state), the banner, the model-loading
row, the tab widget, the menus' skeleton (File, View, Help), the status line (each
stage's model and device) and the 10 Hz timer that hands the latest engine snapshot to
the features. Each feature package (``app.conversation``, ``app.performance``,
``app.settings``, ``app.server``, ``app.bench``, ``app.assistant``, ``app.onboarding``,
``app.history``, ``app.tools``) exports ``install(window)``, which adds its tab, menu
items, header widgets and wiring through the window API (``app.core.window_api.WindowApi``).
Features import ``app.core``, never each other: what one hands another is handed over
here, in ``_compose``, and what a feature keeps is on the object its ``install`` returns.

The GUI thread never waits on the engine: engine work goes through EngineController (a
background worker), engine events arrive as queued signals from the EventBridge, and the
timer draws the latest snapshot that the controller's SnapshotPoller took on its own
thread (reading it never calls into the engine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal, SignalInstance
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QFileDialog, QFrame, QHBoxLayout, QLabel, QMainWindow, QPushButton, QTabWidget,
                               QVBoxLayout, QWidget)

from app import assistant, bench, conversation, history, onboarding, performance, server, tools
from app import settings as settings_tab
from app.assistant.voice_preview import PreviewPlayer, speaker_factory
from app.conversation.stop_talking import reply_in_progress
from app.core.background import shutdown_all
from app.core.bridge import EventBridge
from app.core.controller import TRANSITIONS, ControllerMode, ControllerState, EngineController
from app.core.saved_settings import save_config
from app.core.widgets import LevelMeter, set_available
from app.window.accessibility import chain, name_unnamed
from app.window.appearance import ThemeController
from app.window.snapshot_feed import SnapshotFeed
from app.window.status_line import Banner, LoadRow, StageStatus, StatePill
from app.window.window_state import restore_window_state, save_window_state
from engine.config import EngineConfig
from engine.runtime.failures import ModelLoadError

POLL_MS = 100  # meters and graphs at 10 Hz
LISTEN_TIP = "Start or stop listening to the microphone (Ctrl+L)"
INTERRUPT_TIP = "Cut off the reply in progress (Esc)"
RECORDING_TIP = "Play a recording to Parley as if it were said into the microphone (Ctrl+O)"


def echo_text(status: str | None) -> str:
    """The header's echo line from the engine's status ("echo cancellation: on, …"),
    which names itself already: only its first letter is raised."""
    return status[:1].upper() + status[1:] if status else ""


class _WindowSignals(QObject):
    """The window's signals (``WindowApi``'s are properties: a Protocol cannot declare a
    Qt signal that a window's class attribute matches)."""

    interrupted = Signal()
    config_requested = Signal(object, str)
    placements_shown = Signal(object)


class MainWindow(QMainWindow):
    """Parley's window. ``autoload`` loads the models of ``config`` at once (in the background).

    What a feature's ``install(window)`` may use of it is ``app.core.window_api.WindowApi``;
    the rest (the feature objects ``_compose`` keeps, the header's controls) is the
    window's own and its tests'.
    """

    def __init__(self, config: EngineConfig, settings, autoload: bool = True,
                 notes: list[str] | None = None) -> None:
        super().__init__()
        self.settings = settings
        self._signals = _WindowSignals(self)
        self.setWindowTitle("Parley")
        self.setMinimumSize(1024, 640)
        self.bridge = EventBridge(self)
        self.controller = EngineController(config, self.bridge, self)
        self.closed = False
        self.shutdown_stuck: list[str] = []
        #: The config last asked for: what a failed load's "another device" starts from.
        self.requested_config: EngineConfig = config
        #: The tabs' pages by title ("Conversation", "Settings", …).
        self.pages: dict[str, QWidget] = {}
        self._feed = SnapshotFeed()
        self._closing: list[Callable[[], list[str] | None]] = []
        self._header_widgets: list[QWidget] = []
        self._save_on_load = False  # the next loaded config came from apply_config
        self._seen = None  # the snapshot whose placements were last compared
        self._shown_placements: tuple = ((), ())  # (placements, notes) in the status line
        self._build()
        self._connect()
        self.appearance = ThemeController(self, settings)  # View > Theme
        self._compose(autoload)
        chain(self.listen_button, self.interrupt_button, *self._header_widgets, self.tabs.tabBar())
        name_unnamed(self)
        # Rows added later (benchmark layouts, server clients) are named when shown.
        self.tabs.currentChanged.connect(lambda _i: name_unnamed(self.tabs.currentWidget()))
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self.tick)
        self._timer.start()
        for note in notes or []:
            self.banner.show_message(note, "info")
        self.controller.discover()
        if autoload:
            self.controller.apply(config)

    def _compose(self, autoload: bool) -> None:
        """The features, in tab order (Ctrl+1…) and File menu order, and what one hands another."""
        # The thinking chime plays as the voice preview does, on a sink of its own.
        self.chat = conversation.install(
            self, PreviewPlayer(speaker_factory(self.controller), self.banner.show_message, self))
        self.conversation = self.chat.view  # the transcript the Assistant tab clears
        self.talk_key = self.chat.talk_key
        self.history_action = history.install(self)  # File > Conversation history…
        self.performance = performance.install(self, beside=self.chat.add_beside)
        self.tools = tools.install(self, beside=self.chat.add_beside)  # the timers, right of the meters
        # The conversation's tool rows name an MCP tool's server, as the Settings tab's Tools group.
        self.panel = settings_tab.install(self, tool_support_shown=self.conversation.set_tool_support)
        self.panel.ptt_key.setCurrentText(self.talk_key.key)
        self.panel.ptt_key_changed.connect(self.talk_key.set_key)
        self.server_panel = server.install(self)
        self.bench_panel = bench.install(self)
        self.assistant_panel = assistant.install(self)
        self.assistant_panel.conversation_cleared.connect(self.conversation.clear)
        # The device check's dropdowns list what the Settings tab's discovery found.
        panel = self.panel
        self.onboarding = onboarding.install(self, autoload=autoload,
                                             audio_devices=lambda: (panel.inputs, panel.outputs))
        self.offers = self.onboarding.offers

    # ------------------------------------------------------------------ window API
    @property
    def widget(self) -> QMainWindow:
        """The window as a Qt widget (``WindowApi.widget``): itself."""
        return self

    @property
    def interrupted(self) -> SignalInstance:
        """The header's Interrupt (or Esc) cut the reply off."""
        return self._signals.interrupted

    @property
    def config_requested(self) -> SignalInstance:
        """``apply_config`` was asked to apply this config; the note says why (may be "")."""
        return self._signals.config_requested

    @property
    def placements_shown(self) -> SignalInstance:
        """The status line now shows the placements of this EngineSnapshot."""
        return self._signals.placements_shown

    def add_tab(self, title: str, widget: QWidget) -> QWidget:
        """Add a tab showing ``widget`` and its View menu action (Ctrl+ its position);
        returns the tab's page (``pages[title]``)."""
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 12, 0, 0)
        layout.addWidget(widget)
        self.tabs.addTab(page, title)
        self.pages[title] = page
        action = QAction(title, self)
        if self.tabs.count() <= 9:
            action.setShortcut(QKeySequence(f"Ctrl+{self.tabs.count()}"))
        action.triggered.connect(lambda _checked=False: self.tabs.setCurrentWidget(page))
        self.menus["view"].insertAction(self._view_tabs_end, action)
        return page

    def show_tab(self, page: QWidget) -> None:
        """Make ``page`` (returned by ``add_tab``) the current tab."""
        self.tabs.setCurrentWidget(page)

    def add_file_action(self, action: QAction) -> None:
        """Add ``action`` to the File menu, above Quit."""
        self.menus["file"].insertAction(self._quit_separator, action)

    def add_header_widget(self, widget: QWidget, space_before: int = 0) -> None:
        """Add ``widget`` to the header after the controls added before it (left of the
        level meter), in the Tab order after them too."""
        if space_before:
            self._header_row.insertSpacing(self._header_at, space_before)
            self._header_at += 1
        self._header_row.insertWidget(self._header_at, widget)
        self._header_at += 1
        self._header_widgets.append(widget)

    def add_status_widget(self, widget: QWidget) -> None:
        """Add ``widget`` at the right end of the status line."""
        self.statusBar().addPermanentWidget(widget)

    def on_tick(self, callback: Callable[[Any], object], *, shown: QWidget | None = None,
                fresh: bool = False) -> None:
        """Call ``callback(snapshot)`` on every tick (10 Hz) with the latest EngineSnapshot,
        or None before an engine has one. ``fresh``: only for a snapshot it was not given
        yet (never None). ``shown``: only while that widget's tab is the current one."""
        self._feed.subscribe(callback, shown, fresh)

    def on_close(self, callback: Callable[[], list[str] | None]) -> None:
        """Call ``callback()`` when the window closes, before the engine shuts down (in
        the reverse order of the calls); it returns the names of threads still running."""
        self._closing.append(callback)

    def apply_config(self, config: EngineConfig, note: str = "") -> None:
        """Apply ``config`` (the Settings tab's Apply, a benchmark layout, a retry on
        another device) and save it once it is applied; ``note`` says why (shown by the
        Settings tab). Invalid settings change nothing, on disk neither; a config given
        with --config is used, but saved only when applied through here."""
        self._save_on_load = True
        self.requested_config = config
        self.config_requested.emit(config, note)
        self.controller.apply(config)

    def interrupt(self) -> None:
        """Cut off the reply in progress (Interrupt, Esc)."""
        self.controller.interrupt()
        self.interrupted.emit()

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
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
        self.load_row = LoadRow()
        body.addWidget(self.load_row)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("mainTabs")
        self.tabs.tabBar().setAccessibleName("Main tabs")
        self.tabs.setDocumentMode(True)
        self.tabs.tabBar().setDrawBase(False)
        body.addWidget(self.tabs, 1)
        root.addLayout(body, 1)
        self.setCentralWidget(central)
        self.stage_status = StageStatus()
        self.statusBar().addWidget(self.stage_status, 1)
        self.statusBar().setSizeGripEnabled(False)
        self.statusBar().setContentsMargins(6, 0, 14, 0)
        self._menus()

    def _header(self) -> QFrame:
        header = QFrame()
        header.setObjectName("header")
        row = self._header_row = QHBoxLayout(header)
        row.setContentsMargins(16, 10, 16, 10)
        row.setSpacing(12)
        title = QLabel("Parley")
        title.setObjectName("appTitle")
        self.listen_button = QPushButton("Listen")
        self.listen_button.setObjectName("listenButton")
        self.listen_button.setToolTip(LISTEN_TIP)
        self.interrupt_button = QPushButton("Interrupt")
        self.interrupt_button.setToolTip(INTERRUPT_TIP)
        self.level = LevelMeter()
        self.level.setMinimumWidth(260)
        self.pill = StatePill()
        row.addWidget(title)
        row.addSpacing(8)
        row.addWidget(self.listen_button)
        row.addWidget(self.interrupt_button)
        self._header_at = row.count()  # where add_header_widget puts the next one
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

    def _menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.listen_action = QAction("Listen / Stop", self, shortcut=QKeySequence("Ctrl+L"))
        self.listen_action.triggered.connect(self.toggle_listening)
        interrupt = QAction("Interrupt reply", self, shortcut=QKeySequence("Esc"))
        interrupt.triggered.connect(self.interrupt)
        recording = self.recording_action = QAction("Converse with a recording…", self,
                                                    shortcut=QKeySequence("Ctrl+O"))
        recording.triggered.connect(self._choose_recording)
        quit_action = QAction("Quit", self, shortcut=QKeySequence(QKeySequence.StandardKey.Quit))
        quit_action.triggered.connect(self.close)
        for action in (self.listen_action, interrupt, recording):
            file_menu.addAction(action)
        file_menu.setToolTipsVisible(True)  # a disabled item says why
        self._quit_separator = file_menu.addSeparator()
        file_menu.addAction(quit_action)
        view = self.menuBar().addMenu("&View")
        self._view_tabs_end = view.addSeparator()  # the tabs above, the features' options below
        #: The menus by name, for the features that add their actions (``install(window)``).
        self.menus = {"file": file_menu, "view": view, "help": self.menuBar().addMenu("&Help")}

    def _connect(self) -> None:
        c = self.controller
        self.bridge.engine_error.connect(lambda stage, msg: self.banner.show_message(f"{stage} stage: {msg}"))
        c.error.connect(self.banner.show_message)
        c.state_changed.connect(self._state_changed)
        c.load_started.connect(lambda _config: self.load_row.start())
        c.load_progress.connect(self.load_row.progress)
        c.engine_changed.connect(self._engine_changed)
        c.applied.connect(self._applied)
        c.apply_failed.connect(self._apply_failed)
        self.listen_button.clicked.connect(self.toggle_listening)
        self.interrupt_button.clicked.connect(self.interrupt)
        self._state_changed(c.state)

    # ------------------------------------------------------------------ controls
    def toggle_listening(self) -> None:
        """Listen when idle or typing, stop when listening."""
        if self.controller.mode in (ControllerMode.MIC, ControllerMode.FILE):
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
        running = c.mode in (ControllerMode.MIC, ControllerMode.FILE) or state is ControllerState.LISTENING
        busy = state in TRANSITIONS
        self.listen_button.setText("Stop" if running else "Listen")
        self.listen_button.setProperty("listening", running)
        self.listen_button.style().unpolish(self.listen_button)
        self.listen_button.style().polish(self.listen_button)
        # While a new engine is built, the current one is about to be replaced.
        why_not = self._listen_why_not(state)
        set_available(self.listen_button, why_not, LISTEN_TIP)
        self.listen_action.setEnabled(self.listen_button.isEnabled())
        if why_not is None and c.mode in (ControllerMode.MIC, ControllerMode.FILE):
            why_not = "Stop the conversation first: a recording is answered instead of the microphone"
        set_available(self.recording_action, why_not, RECORDING_TIP)
        self._update_interrupt(c.snapshot() if c.mode is not ControllerMode.IDLE and not busy else None)

    def _listen_why_not(self, state: ControllerState) -> str | None:
        c = self.controller
        if c.engine is None:
            return ("The models are loading: Listen is possible once they are ready" if c.loading
                    else "No models are loaded: choose them on the Settings tab")
        if state in TRANSITIONS:
            return f"{state.label} wait a moment"
        if c.building:
            return "A new engine is being built: wait until it is ready"
        return None

    def _update_interrupt(self, snap) -> None:
        """Interrupt is enabled only while a reply is being thought or heard (Esc always
        tries: it may come before the snapshot shows a reply just asked for)."""
        c = self.controller
        if c.mode is ControllerMode.IDLE or c.state in TRANSITIONS:
            why_not = "Nothing to interrupt: Parley is not listening"
        elif not reply_in_progress(snap):
            why_not = "Nothing to interrupt: Parley is not thinking or speaking"
        else:
            why_not = None
        set_available(self.interrupt_button, why_not, INTERRUPT_TIP)

    # ------------------------------------------------------------------ loading
    def _engine_changed(self, _engine) -> None:
        self._seen = None
        self._feed.reset()
        self._loaded()

    def _applied(self, _diff) -> None:
        """Apply changed the running engine in place: the conversation goes on."""
        self._loaded()

    def _loaded(self) -> None:
        self.load_row.hide()
        snap = self.controller.snapshot()  # taken by the load or Apply job, off this thread
        if snap is not None:
            self._show_placements(snap)
        if self._save_on_load:
            self._save_on_load = False
            save_config(self.settings, self.controller.config)
        self._state_changed(self.controller.state)

    def _apply_failed(self, failure) -> None:  # an app.core.background.Failure
        self._save_on_load = False
        self.load_row.hide()
        if self.controller.engine is None or isinstance(failure.error, ModelLoadError):
            self.banner.show_message(f"The models could not be loaded: {failure} "
                                     "Change them on the Settings tab.")
        self._state_changed(self.controller.state)

    def _show_placements(self, snap) -> None:
        """The status line: the model and device of every stage, and what is bundled."""
        self._shown_placements = (snap.placements, snap.notes)
        self.stage_status.show_placements(snap.placements, snap.notes)
        self.placements_shown.emit(snap)

    # ------------------------------------------------------------------ polling
    def tick(self) -> None:
        """The 10 Hz poll: the poller's latest snapshot feeds the header, the status line
        and the features' ``on_tick`` callbacks (reading it costs nothing: the poller took
        it on its own thread)."""
        c = self.controller
        c.poll()
        snap = c.snapshot()
        if snap is not None:
            self.level.set_level(snap.input_level, c.mode in (ControllerMode.MIC, ControllerMode.FILE),
                                 c.mic_passing)
            echo = echo_text(snap.echo)
            if echo != self.echo_label.text():
                self.echo_label.setText(echo)
            if snap is not self._seen:
                self._seen = snap
                if (snap.placements, snap.notes) != self._shown_placements:
                    self._show_placements(snap)  # an Apply reloaded a model
        self._update_interrupt(snap)
        self._feed.deliver(snap, self.tabs.currentWidget())

    # ------------------------------------------------------------------ closing
    def restore_state(self) -> None:
        """Geometry, the conversation/meters split and the tab of the last session
        (``app.window.window_state``)."""
        restore_window_state(self, self.chat.split, self.tabs, self.settings)

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        """Let the features close, stop the engine and join its threads, then close."""
        if not self.closed:
            self.closed = True
            self._timer.stop()
            save_window_state(self, self.chat.split, self.tabs, self.settings)
            # Last installed, first closed: serving and benchmarking end before the
            # desktop engine, whose models their units share.
            for close in reversed(self._closing):
                self.shutdown_stuck += close() or []
            self.shutdown_stuck += self.controller.shutdown()
            # Every background lane still alive under the window (a probe, a scan) is joined.
            self.shutdown_stuck += shutdown_all(2.0, under=self)
            self.settings.sync()
        event.accept()
