"""The Server tab: serve the realtime API (``parley-cli serve``) from the app.

A form (host, port, pipelines, API key, allowed origins, TLS: a self-signed certificate or
the user's certificate and key files, or plain ws:// off this machine, named insecure),
Start/Stop, a status line (where it serves, or why
it could not start), the TLS certificate's fingerprint and CA file while serving over
TLS, and two live tables: the pipeline units
(client, state, turns, current stage, last voice-to-voice) and the shared models (device,
memory, lock figures). The tables draw the ServerController's latest ``pool_status()``
reading, taken on its own thread; the window's 10 Hz timer calls ``tick`` only while this
tab is visible.

Host, port, pipelines, origins and the TLS choice (``ui/server_tls_*``) persist in the
app's QSettings (``ui/server_*``), saved when a start succeeds; the API key is never
stored, logged or shown.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QCheckBox, QGridLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton,
                               QSpinBox, QVBoxLayout, QWidget)

from app.core.display import fmt_bytes, fmt_ms, model_label
from app.core.saved_settings import set_ui_value, ui_value
from app.core.widgets import data_table, set_row
from app.server.controller import PoolView, ServerController, ServeRequest, ServerState
from engine.server.server_settings import LOOPBACK_HOSTS

UNIT_COLUMNS = ("Unit", "State", "Client", "Turns", "Current stage", "Last voice-to-voice")
MODEL_COLUMNS = ("Stage", "Backend", "Model", "Device", "Memory", "Lock acquisitions",
                 "Contended", "Wait p95", "Utilization")
MAX_PIPELINES = 16


class ServerPanel(QWidget):
    """Start/stop serving; the units and shared models as the server reports them."""

    def __init__(self, server: ServerController, settings=None, parent: QWidget | None = None) -> None:
        """``settings`` (QSettings) keeps host, port, pipelines and origins; None: nothing
        is kept."""
        super().__init__(parent)
        self.server = server
        self.settings = settings
        self._drawn: PoolView | None = None
        self._requested: ServeRequest | None = None  # what the start in flight asked for
        self._build()
        self._restore()
        server.state_changed.connect(self._state_changed)
        server.started.connect(self._started)
        server.start_failed.connect(self._start_failed)
        server.stopped.connect(self._stopped)
        server.progress.connect(self._progress)
        self._state_changed(server.state)

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(12)
        outer.addWidget(self._form_group())
        units_box = QGroupBox("Pipeline units")
        units_layout = QVBoxLayout(units_box)
        self.units_table = data_table(UNIT_COLUMNS, "serverUnits", "Pipeline units",
                                  UNIT_COLUMNS.index("Client"))
        self.units_hint = QLabel("Not serving.")
        self.units_hint.setObjectName("hint")
        units_layout.addWidget(self.units_table)
        units_layout.addWidget(self.units_hint)
        models_box = QGroupBox("Shared models")
        models_layout = QVBoxLayout(models_box)
        self.models_table = data_table(MODEL_COLUMNS, "serverModels", "Shared models",
                                   MODEL_COLUMNS.index("Model"))
        self.models_hint = QLabel("Every unit runs on these; a model the conversation already "
                                  "holds is shared, not loaded again.")
        self.models_hint.setObjectName("hint")
        self.models_hint.setWordWrap(True)
        models_layout.addWidget(self.models_table)
        models_layout.addWidget(self.models_hint)
        outer.addWidget(units_box, 1)
        outer.addWidget(models_box, 1)
        QWidget.setTabOrder(self.host, self.port)
        QWidget.setTabOrder(self.port, self.pipelines)
        QWidget.setTabOrder(self.pipelines, self.api_key)
        QWidget.setTabOrder(self.api_key, self.origins)
        QWidget.setTabOrder(self.origins, self.tls_self_signed)
        QWidget.setTabOrder(self.tls_self_signed, self.tls_cert)
        QWidget.setTabOrder(self.tls_cert, self.tls_key)
        QWidget.setTabOrder(self.tls_key, self.insecure_plaintext)
        QWidget.setTabOrder(self.insecure_plaintext, self.start_button)
        QWidget.setTabOrder(self.start_button, self.units_table)
        QWidget.setTabOrder(self.units_table, self.models_table)

    def _form_group(self) -> QGroupBox:
        box = QGroupBox("Realtime server (OpenAI Realtime API over WebSocket)")
        grid = QGridLayout(box)
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(8)
        self.host = QLineEdit("127.0.0.1")
        self.host.setObjectName("serverHost")
        self.host.setAccessibleName("Host")
        self.host.setToolTip("The address to listen on: 127.0.0.1 serves this machine only; "
                             "0.0.0.0 or another address needs a strong API key and TLS")
        self.port = QSpinBox()
        self.port.setObjectName("serverPort")
        self.port.setAccessibleName("Port")
        self.port.setRange(1, 65535)
        self.port.setValue(8765)
        self.port.setToolTip("The TCP port; clients connect to ws://host:port/v1/realtime")
        self.pipelines = QSpinBox()
        self.pipelines.setObjectName("serverPipelines")
        self.pipelines.setAccessibleName("Pipelines")
        self.pipelines.setRange(1, MAX_PIPELINES)
        self.pipelines.setValue(1)
        self.pipelines.setToolTip("Pipeline units: how many clients are served at once. They "
                                  "share one copy of each model with the conversation here")
        self.api_key = QLineEdit()
        self.api_key.setObjectName("serverKey")
        self.api_key.setAccessibleName("API key")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("none (loopback only)")
        self.api_key.setToolTip("Clients must send it as a bearer token. Required for "
                                "non-loopback hosts (20+ characters, 10+ different ones); "
                                "never stored")
        self.origins = QLineEdit()
        self.origins.setObjectName("serverOrigins")
        self.origins.setAccessibleName("Allowed origins")
        self.origins.setPlaceholderText("none: browsers are refused")
        self.origins.setToolTip("Browser origins allowed to connect, comma-separated "
                                "(e.g. http://localhost:3000); clients that send no Origin "
                                "header are not affected")
        self.tls_self_signed = QCheckBox("TLS, self-signed")
        self.tls_self_signed.setObjectName("serverTlsSelfSigned")
        self.tls_self_signed.setAccessibleName("TLS with a self-signed certificate")
        self.tls_self_signed.setToolTip("Serve wss:// and https:// with a certificate Parley makes "
                                        "once for this machine's names and addresses and keeps; "
                                        "clients trust it with the CA file shown once serving")
        self.tls_self_signed.toggled.connect(self._tls_choice_changed)
        self.insecure_plaintext = QCheckBox("Plain ws:// off this machine (insecure)")
        self.insecure_plaintext.setObjectName("serverInsecurePlaintext")
        self.insecure_plaintext.setAccessibleName("Serve without TLS to other machines (insecure)")
        self.insecure_plaintext.setToolTip("Serve plain ws:// and http:// on an address other "
                                           "machines reach: anyone on the network can read the "
                                           "API key, the audio and the text. Prefer TLS")
        self.tls_cert = QLineEdit()
        self.tls_cert.setObjectName("serverTlsCert")
        self.tls_cert.setAccessibleName("TLS certificate file")
        self.tls_cert.setPlaceholderText("none: no TLS")
        self.tls_cert.setToolTip("Your own TLS certificate (PEM, with its chain); needs the key "
                                 "file. Clients then connect to wss:// and https://")
        self.tls_key = QLineEdit()
        self.tls_key.setObjectName("serverTlsKey")
        self.tls_key.setAccessibleName("TLS key file")
        self.tls_key.setPlaceholderText("the certificate's key")
        self.tls_key.setToolTip("The unencrypted PEM private key of the TLS certificate")
        self.tls_info = QLabel("")
        self.tls_info.setObjectName("hint")
        self.tls_info.setAccessibleName("TLS certificate")
        self.tls_info.setWordWrap(True)
        self.tls_info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tls_info.hide()
        self.start_button = QPushButton("Start serving")
        self.start_button.setObjectName("primary")
        self.start_button.setAccessibleName("Start or stop serving")
        self.start_button.clicked.connect(self.toggle)
        self.status = QLabel("Not serving.")
        self.status.setObjectName("panelMessage")
        self.status.setAccessibleName("Server status")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        for col, (text, widget) in enumerate((("Host", self.host), ("Port", self.port),
                                              ("Pipelines", self.pipelines))):
            label = QLabel(text)
            label.setBuddy(widget)
            grid.addWidget(label, 0, 2 * col)
            grid.addWidget(widget, 0, 2 * col + 1)
        key_label = QLabel("API key")
        key_label.setBuddy(self.api_key)
        origins_label = QLabel("Allowed origins")
        origins_label.setBuddy(self.origins)
        grid.addWidget(key_label, 1, 0)
        grid.addWidget(self.api_key, 1, 1)
        grid.addWidget(origins_label, 1, 2)
        grid.addWidget(self.origins, 1, 3, 1, 3)
        grid.addWidget(self.tls_self_signed, 2, 0, 1, 2)
        for col, (text, widget) in enumerate((("Certificate", self.tls_cert), ("Key", self.tls_key))):
            label = QLabel(text)
            label.setBuddy(widget)
            grid.addWidget(label, 2, 2 + 2 * col)
            grid.addWidget(widget, 2, 3 + 2 * col)
        row = QHBoxLayout()
        row.addWidget(self.start_button)
        row.addSpacing(8)
        row.addWidget(self.status, 1)
        grid.addWidget(self.insecure_plaintext, 3, 0, 1, 6)
        grid.addLayout(row, 4, 0, 1, 6)
        grid.addWidget(self.tls_info, 5, 0, 1, 6)
        grid.setColumnStretch(1, 3)
        grid.setColumnStretch(3, 1)
        grid.setColumnStretch(5, 1)
        return box

    # ------------------------------------------------------------------ settings
    def _restore(self) -> None:
        if self.settings is None:
            return
        self.host.setText(str(ui_value(self.settings, "server_host", "127.0.0.1")))
        self.port.setValue(ui_value(self.settings, "server_port", 8765))
        self.pipelines.setValue(min(MAX_PIPELINES, max(1, ui_value(self.settings, "server_pipelines", 1))))
        origins = ui_value(self.settings, "server_origins", "")
        self.origins.setText(", ".join(origins) if isinstance(origins, list) else str(origins or ""))
        self.tls_self_signed.setChecked(ui_value(self.settings, "server_tls_self_signed", False))
        self.tls_cert.setText(str(ui_value(self.settings, "server_tls_cert", "") or ""))
        self.tls_key.setText(str(ui_value(self.settings, "server_tls_key", "") or ""))

    def _save(self, request: ServeRequest) -> None:
        if self.settings is None:
            return
        set_ui_value(self.settings, "server_host", request.host)
        set_ui_value(self.settings, "server_port", request.port)
        set_ui_value(self.settings, "server_pipelines", request.pipelines)
        set_ui_value(self.settings, "server_origins", ", ".join(request.allow_origins))
        set_ui_value(self.settings, "server_tls_self_signed", request.tls_self_signed)
        set_ui_value(self.settings, "server_tls_cert", request.tls_cert or "")
        set_ui_value(self.settings, "server_tls_key", request.tls_key or "")
        self.settings.sync()

    def request(self) -> ServeRequest:
        """What the form asks for."""
        origins = tuple(o.strip() for o in self.origins.text().split(",") if o.strip())
        self_signed = self.tls_self_signed.isChecked()
        # With self-signed the file fields are greyed out: what they still hold is not sent.
        cert = None if self_signed else self.tls_cert.text().strip() or None
        key = None if self_signed else self.tls_key.text().strip() or None
        return ServeRequest(host=self.host.text().strip() or "127.0.0.1", port=self.port.value(),
                             pipelines=self.pipelines.value(),
                             api_key=self.api_key.text() or None, allow_origins=origins,
                             tls_self_signed=self_signed, tls_cert=cert, tls_key=key,
                             insecure_plaintext=self.insecure_plaintext.isChecked())

    def _tls_choice_changed(self, _checked: bool = False) -> None:
        files = self.server.state is ServerState.STOPPED and not self.tls_self_signed.isChecked()
        self.tls_cert.setEnabled(files)
        self.tls_key.setEnabled(files)

    # ------------------------------------------------------------------ start / stop
    def toggle(self) -> None:
        """Start when stopped, stop when serving."""
        if self.server.state is ServerState.SERVING:
            self.server.stop()
            return
        request = self.request()
        if request.host not in LOOPBACK_HOSTS and not request.api_key:
            self._message(f"Could not start: serving on {request.host} lets other machines "
                          "connect; enter an API key (or serve on 127.0.0.1).", "error")
            return
        self._requested = request
        self._message(f"Loading the models for {request.pipelines} "
                      f"pipeline{'s' if request.pipelines > 1 else ''}…", "info")
        self.server.start(request)

    def _state_changed(self, state: ServerState) -> None:
        serving = state is ServerState.SERVING
        busy = state in (ServerState.STARTING, ServerState.STOPPING)
        self.start_button.setText({ServerState.SERVING: "Stop serving",
                                   ServerState.STARTING: "Starting…",
                                   ServerState.STOPPING: "Stopping…"}.get(state, "Start serving"))
        self.start_button.setEnabled(not busy)
        for w in (self.host, self.port, self.pipelines, self.api_key, self.origins,
                  self.tls_self_signed, self.insecure_plaintext):
            w.setEnabled(state is ServerState.STOPPED)
        self._tls_choice_changed()
        if state is ServerState.STOPPING:
            self._message("Stopping: closing every client…", "info")
        if not serving:
            self._clear_tables()

    def _started(self, url: str) -> None:
        request = self._requested or self.request()
        self._save(request)
        loaded = self.server.models_loaded
        shared = "every model shared with the conversation" if loaded == 0 else \
            f"{loaded} model{'s' if loaded > 1 else ''} loaded"
        self._message(f"Serving on {url} · {request.pipelines} "
                      f"pipeline{'s' if request.pipelines > 1 else ''} · {shared}", "ok")
        self.units_hint.setText("Waiting for clients…")
        tls = self.server.tls
        if tls is not None:
            trust = (f" · clients verify it with the CA file {tls.ca_file}" if tls.ca_file
                     else f" · {tls.cert_file}")
            self.tls_info.setText(f"TLS certificate SHA-256 {tls.fingerprint}{trust}")
            self.tls_info.show()

    def _start_failed(self, message: str) -> None:
        self._message(f"Could not start: {message}", "error")

    def _stopped(self, stuck: list) -> None:
        self.tls_info.hide()
        self.tls_info.setText("")
        if stuck:
            self._message("Stopped; some threads did not end in time: " + ", ".join(stuck), "error")
        else:
            self._message("Not serving.", "info")

    def _progress(self, stage: str, _fraction, text: str) -> None:
        if self.server.state is ServerState.STARTING:
            self._message(f"Loading — {stage}: {text}", "info")

    def _message(self, text: str, level: str) -> None:
        self.status.setProperty("level", level)
        self.status.setText(text)
        self.status.style().unpolish(self.status)
        self.status.style().polish(self.status)

    # ------------------------------------------------------------------ drawing
    def tick(self) -> None:
        """Draw the latest pool reading, once; the window calls it only while visible."""
        view = self.server.latest()
        if view is None or view is self._drawn:
            return
        self._drawn = view
        self.update_pool(view.status)

    def update_pool(self, pool: dict) -> None:
        """Show one ``pool_status()`` dict (``GET /v1/pool``)."""
        units = list(pool.get("units") or [])
        self.units_table.setRowCount(len(units))
        for row, u in enumerate(units):
            v2v = u.get("last_voice_to_voice_s")
            client = u.get("client")
            set_row(self.units_table, row, [
                str(u.get("unit", row)), str(u.get("state", "—")), client or "—",
                str(u.get("turns", 0)), u.get("stage") or "—",
                f"{v2v * 1000:.0f} ms" if v2v is not None else "—"])
        busy = sum(1 for u in units if u.get("state") == "busy")
        rss = pool.get("rss_bytes")
        self.units_hint.setText(
            f"{busy} of {pool.get('num_pipelines', len(units))} units busy"
            + (f" · process RSS {fmt_bytes(rss)}" if rss is not None else "")
            + ("" if busy else " · waiting for clients"))
        models = list(pool.get("models") or [])
        self.models_table.setRowCount(len(models))
        for row, m in enumerate(models):
            lock = m.get("lock") or {}
            device = str(m.get("device") or "—")
            actual = m.get("actual_device")
            if actual and str(actual) != device:
                device = f"{device} ({actual})"
            util = lock.get("utilization")
            set_row(self.models_table, row, [
                str(m.get("stage", "—")), str(m.get("backend", "—")), model_label(m.get("model")),
                device, fmt_bytes(m.get("memory_bytes")),
                str(lock["acquisitions"]) if "acquisitions" in lock else "—",
                str(lock["contended"]) if "contended" in lock else "—",
                fmt_ms(lock.get("wait_p95_s")) if lock else "—",
                f"{util * 100:.0f} %" if util is not None else "—",
            ], tips={2: str(m.get("model") or "")})

    def _clear_tables(self) -> None:
        self._drawn = None
        self.units_table.setRowCount(0)
        self.models_table.setRowCount(0)
        self.units_hint.setText("Not serving.")
