"""First run: fetch the hub models Parley prefers, or say that the bundled ones are in use.

``offline_notice`` is the line the main window shows while a stage runs on a bundled
offline model. ``hub_downloads`` lists what would replace them (the model ``auto`` picked
by budget where the machine is calibrated, else its default by name), each with its row
(``app.onboarding.offer_rows``: download size, expected latency here, what it adds), and
``ModelDownloadDialog`` downloads that into the standard Hugging Face cache (where the
backends look first) in the background, showing size, speed and time left, with a
Cancel button that stops the transfer: between files, and inside a file at the next
10 MB chunk of a plain HTTP download (huggingface_hub then deletes the partial file, so
the cache never holds half a file; files already complete are kept, and "Try again"
fetches only the rest). Hub "Xet" transfers stop at the end of the current file.
"""

from __future__ import annotations

import enum
import io
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QDialog, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget)

from app.core.background import Command, JobKind, Outcome, SerialLane, Task
from app.core.display import bundled_name
from app.onboarding.offer_rows import OfferRow, offer_row
from engine.models.model_cache import human_bytes

if TYPE_CHECKING:
    from huggingface_hub import DryRunFileInfo

STAGE_LABELS = {"vad": "voice detection", "stt": "speech recognition", "llm": "language model",
                "tts": "voice"}
#: The files each backend reads from a hub repo; they match what the backends fetch
#: themselves (tests/packaging/test_packaging.py checks the ones the backends declare).
HUB_PATTERNS = {
    "faster-whisper": ("config.json", "preprocessor_config.json", "model.bin", "tokenizer.json",
                       "vocabulary.*"),
    "transformers-whisper": ("*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"),
    "transformers": ("*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"),
    "mlx-whisper": ("config.json", "weights.safetensors", "weights.npz"),
    "mlx-lm": ("*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"),
    "kokoro": ("config.json", "kokoro-v1_0.pth", "voices/*.pt"),
}


@dataclass(frozen=True)
class HubDownload:
    """One hub repo to fetch, limited to the files its backend reads."""

    stage: str
    repo_id: str
    patterns: tuple[str, ...] | None  # None: the whole repo
    offer: OfferRow | None = None  # size, expected latency, what it adds (None: not known)

    @property
    def label(self) -> str:
        """``voice: rhasspy/piper-voices (en_US-lessac-medium.onnx)`` for the dialog's list."""
        text = f"{STAGE_LABELS.get(self.stage, self.stage)}: {self.repo_id}"
        first = self.patterns[0] if self.patterns else ""
        if "/" in first and not any(c in first for c in "*?["):  # one file of a big repo
            text += f" ({PurePath(first).name})"
        return text


def offline_notice(placements: Iterable) -> str | None:
    """"Parley is using the bundled offline models: ..." or None when no stage uses one.

    ``placements``: engine Placements or snapshot StagePlacements (anything with
    ``stage``, ``model`` and ``bundled``). The VAD is always the bundled Silero model, so
    it is not news and is left out.
    """
    used = [p for p in placements if p.bundled and p.stage != "vad"]
    if not used:
        return None
    parts = ", ".join(f"{STAGE_LABELS.get(p.stage, p.stage)} {bundled_name(p.model)}" for p in used)
    return (f"Parley is using the bundled offline models: {parts}. They are small and work "
            "without a network; larger models can be downloaded when the Hugging Face hub "
            "is reachable.")


def hub_downloads(placements: Iterable) -> list[HubDownload]:
    """The hub models that would replace the bundled ones of engine ``placements``.

    Needs engine Placements (``Engine.placements.values()``): the backend spec says which
    hub model it prefers on the placed device. A Piper voice is one file of a large repo
    (``repo:path``): only that file and its ``.json`` are fetched.
    """
    out: list[HubDownload] = []
    for p in placements:
        if not p.bundled or p.stage == "vad":
            continue
        choice = p.choice
        picked = (choice is not None and choice.chosen is not None and choice.how == "budget"
                  and choice.chosen.build.backend == p.backend
                  and choice.chosen.build.device_kind == p.device.kind)
        hub = choice.model if picked and choice is not None else p.spec.hub_model(p.device.kind)
        if not hub:
            continue
        repo, _, path = hub.partition(":")
        patterns = (path, path + ".json") if path else HUB_PATTERNS.get(p.backend)
        offer = offer_row(p.stage, hub, p.device.kind, choice, current=p.model)
        out.append(HubDownload(p.stage, repo, patterns, offer))
    return out


def describe_error(exc: BaseException, repo_id: str) -> str:
    """What went wrong, in words a user can act on."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (DryRunError, GatedRepoError, LocalEntryNotFoundError,
                                        OfflineModeIsEnabled, RepositoryNotFoundError)

    if isinstance(exc, OfflineModeIsEnabled) or (
            isinstance(exc, (DryRunError, LocalEntryNotFoundError)) and constants.HF_HUB_OFFLINE):
        return (f"Downloads are switched off (HF_HUB_OFFLINE is set), so {repo_id} cannot be "
                "fetched. Start Parley without HF_HUB_OFFLINE to download; until then it keeps "
                "using the bundled offline models.")
    if isinstance(exc, GatedRepoError):
        return (f"{repo_id} is gated on the Hugging Face hub: accept its terms on the model page "
                "and log in (hf auth login), then try again.")
    if isinstance(exc, RepositoryNotFoundError):
        return f"{repo_id} does not exist on the Hugging Face hub (or is private)."
    if isinstance(exc, (DryRunError, LocalEntryNotFoundError)):
        return (f"The Hugging Face hub cannot be reached, so {repo_id} cannot be downloaded. "
                "Check the network connection and try again; Parley keeps using the bundled "
                "offline models meanwhile.")
    if isinstance(exc, OSError) and exc.strerror:
        return f"Downloading {repo_id} failed: {exc.strerror} ({exc.filename or 'network'})."
    return f"Downloading {repo_id} failed: {type(exc).__name__}: {exc}"


class DownloadState(enum.Enum):
    """Where a download stands; the dialog's buttons and texts follow it."""

    IDLE = "idle"
    PLANNING = "planning"  # asking the hub which files and how large
    DOWNLOADING = "downloading"
    CANCELLING = "cancelling"  # Cancel pressed; the worker stops at the next chunk or file
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


class DownloadCancelled(Exception):
    """Raised inside the transfer to unwind a download the user cancelled."""


class _Transfer(Command):
    """Plans and downloads on the dialog's lane; reports ``("planned", total bytes, file
    count)`` and ``("advanced", bytes done, current file, its number)``, and ends with a
    final DownloadState and its message. Every failure is that message, never raised."""

    what = JobKind.DOWNLOAD

    def __init__(self, downloads: Sequence[HubDownload], cache_dir: str | None, endpoint: str | None,
                 on_planned: Callable[[int, int], None] | None = None,
                 on_advanced: Callable[[int, str, int], None] | None = None,
                 on_ended: Callable[[DownloadState, str], None] | None = None) -> None:
        self.downloads = list(downloads)
        self.cache_dir = cache_dir
        self.endpoint = endpoint
        self.cancel = threading.Event()  # Cancel pressed
        self.done_bytes = 0
        self._on_planned, self._on_advanced, self._on_ended = on_planned, on_advanced, on_ended
        self._task: Task | None = None
        self._last_report = 0.0
        self._file = ("", 0)

    @property
    def stopping(self) -> bool:
        """Cancel was pressed, or the dialog is gone."""
        return self.cancel.is_set() or (self._task is not None and self._task.cancelled)

    def bar_class(self):
        """A tqdm class for huggingface_hub: counts bytes, raises once Cancel is pressed."""
        from tqdm.std import tqdm

        transfer = self

        class CancellableBar(tqdm):
            def __init__(self, *args, **kwargs):
                kwargs.pop("name", None)
                kwargs["file"] = io.StringIO()  # counted here; nothing printed
                super().__init__(*args, **kwargs)

            def update(self, n=1):
                if transfer.stopping:
                    raise DownloadCancelled()
                transfer._add(int(n or 0))
                return super().update(n)

        return CancellableBar

    def _report(self, *args) -> None:
        if self._task is not None:
            self._task.report(*args)

    def _add(self, n: int) -> None:
        self.done_bytes += n
        now = time.monotonic()
        if now - self._last_report >= 0.1:  # ~10 updates a second is plenty for a label
            self._last_report = now
            self._report("advanced", self.done_bytes, *self._file)

    def _snapshot(self, item: HubDownload, *, dry_run: bool) -> list[DryRunFileInfo]:
        """huggingface_hub's ``snapshot_download`` of ``item``, its file-count bars silenced;
        a dry run's files to fetch (a real one's folder is not needed: none)."""
        from huggingface_hub import snapshot_download
        from tqdm.auto import tqdm  # the bar class huggingface_hub itself uses

        class QuietBar(tqdm):  # the snapshot's file-count bars: not for the terminal
            def __init__(self, *args, **kwargs):
                kwargs.pop("name", None)
                super().__init__(*args, **{**kwargs, "file": io.StringIO()})

        got = snapshot_download(item.repo_id, allow_patterns=list(item.patterns or []) or None,
                                cache_dir=self.cache_dir, endpoint=self.endpoint,
                                dry_run=dry_run, tqdm_class=QuietBar)
        return got if isinstance(got, list) else []

    def _plan(self) -> list[tuple[HubDownload, DryRunFileInfo]]:
        files = []
        for item in self.downloads:
            files += [(item, info) for info in self._snapshot(item, dry_run=True) if info.will_download]
            if self.stopping:
                raise DownloadCancelled()
        return files

    def _record_snapshots(self) -> None:
        """Let huggingface_hub write what makes the files a snapshot of the branch.

        The files came one by one at the planned commit, so nothing yet says which commit
        ``main`` is: huggingface_hub 2.x writes ``refs/main`` (and its file listing) only in
        a real ``snapshot_download``, and the backends' offline look-ups need it. With every
        file in the cache, this downloads nothing.
        """
        for item in self.downloads:
            self._snapshot(item, dry_run=False)

    def work(self, task: Task) -> tuple[DownloadState, str]:
        from huggingface_hub import hf_hub_download

        self._task = task
        repo = self.downloads[0].repo_id if self.downloads else "?"
        try:
            files = self._plan()
            self._report("planned", sum(info.file_size or 0 for _item, info in files), len(files))
            bar = self.bar_class()
            for number, (item, info) in enumerate(files, 1):
                if self.stopping:
                    raise DownloadCancelled()
                repo = item.repo_id
                self._file = (info.filename, number)
                self._report("advanced", self.done_bytes, info.filename, number)
                hf_hub_download(item.repo_id, info.filename, revision=info.commit_hash,
                                cache_dir=self.cache_dir, endpoint=self.endpoint, tqdm_class=bar)
            if self.stopping:
                raise DownloadCancelled()
            self._record_snapshots()
            if not files:
                return DownloadState.DONE, "Every file is already in the cache: nothing to download."
            return DownloadState.DONE, f"Downloaded {len(files)} files ({human_bytes(self.done_bytes)})."
        except DownloadCancelled:
            return DownloadState.CANCELLED, "Download cancelled."
        except Exception as exc:  # noqa: BLE001 - every failure becomes the dialog's message
            if self.stopping:  # the user asked to stop: that is the outcome to show
                return DownloadState.CANCELLED, "Download cancelled."
            return DownloadState.FAILED, describe_error(exc, repo)

    def progress(self, kind: str, *args) -> None:
        handler = self._on_planned if kind == "planned" else self._on_advanced
        if handler is not None:
            handler(*args)

    def commit(self, outcome: Outcome) -> None:
        state, message = (outcome.got() if outcome.failure is None
                          else (DownloadState.FAILED, outcome.failure.message))
        if self._on_ended is not None:
            self._on_ended(state, message)


class ModelDownloadDialog(QDialog):
    """Download ``downloads`` into the Hugging Face cache, with progress and Cancel.

    ``start()`` begins (the Download button calls it); ``cancel()`` (the Cancel button)
    stops the worker at its next chunk or file; ``wait()`` joins the worker thread.
    ``finished_download`` carries True when every file arrived.
    """

    finished_download = Signal(bool)

    def __init__(self, downloads: Sequence[HubDownload], parent: QWidget | None = None, *,
                 cache_dir: str | None = None, endpoint: str | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Download models")
        self.setMinimumWidth(480)
        self.downloads = list(downloads)
        self._cache_dir = cache_dir
        self._endpoint = endpoint
        self._transfer: _Transfer | None = None
        self._lane = SerialLane(self, "parley-model-download")
        self._total: int | None = None
        self._files = 0
        self._samples: deque[tuple[float, int]] = deque(maxlen=50)
        self.state = DownloadState.IDLE
        self.message = ""

        self.intro = QLabel(self._intro_text())
        self.intro.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.detail = QLabel("")
        self.detail.setObjectName("downloadDetail")
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.start_button = QPushButton("Download")
        self.start_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel")
        self.start_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self._on_cancel_clicked)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.start_button)
        layout = QVBoxLayout(self)
        for widget in (self.intro, self.progress, self.detail, self.status):
            layout.addWidget(widget)
        layout.addLayout(buttons)
        self._sync_buttons()

    def _intro_text(self) -> str:
        if not self.downloads:
            return "Every model Parley needs is already here."
        rows = "".join(f"<li>{d.offer.html(d.label) if d.offer else d.label}</li>"
                       for d in self.downloads)
        return ("Parley will download these models from the Hugging Face hub into its cache "
                f"(once; later starts read them from disk):<ul>{rows}</ul>")

    # ------------------------------------------------------------------ control
    @property
    def running(self) -> bool:
        """True while the transfer runs on the lane's thread."""
        return self._lane.running

    def start(self) -> None:
        """Plan and download in the background (does nothing while a transfer runs)."""
        if self.running or not self.downloads:
            return
        self._transfer = _Transfer(self.downloads, self._cache_dir, self._endpoint,
                                   self._on_planned, self._on_advanced, self._on_ended)
        self._total, self._files = None, 0
        self._samples.clear()
        self.progress.setRange(0, 0)  # busy until the sizes are known
        self._set_state(DownloadState.PLANNING, "Asking the Hugging Face hub what to fetch…")
        self._lane.submit(self._transfer)

    def cancel(self) -> None:
        """Stop the download; the state becomes CANCELLED when the worker has ended.

        Decided by what the window has seen, not by the thread: a worker that has just
        ended but whose result is still queued for the GUI is cancelled all the same.
        """
        busy = self.state in (DownloadState.PLANNING, DownloadState.DOWNLOADING)
        if busy and self._transfer is not None:
            self._transfer.cancel.set()
            self._set_state(DownloadState.CANCELLING, "Cancelling…")

    def wait(self, timeout: float | None = None) -> bool:
        """Join the transfer's thread; True if it has ended."""
        return self._lane.join(3600.0 if timeout is None else timeout)

    def _on_cancel_clicked(self) -> None:
        if self.state in (DownloadState.PLANNING, DownloadState.DOWNLOADING):
            self.cancel()
        else:
            self.reject()

    def reject(self) -> None:
        """Closing the window cancels a running download first."""
        self.cancel()
        super().reject()

    # ------------------------------------------------------------------ worker reports
    def _on_planned(self, total: int, files: int) -> None:
        self._total, self._files = total, files
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        if self.state is DownloadState.PLANNING:
            what = f"{files} files, {human_bytes(total)}" if files else "nothing new"
            self._set_state(DownloadState.DOWNLOADING, f"Downloading {what}…")

    def _on_advanced(self, done: int, filename: str, number: int) -> None:
        now = time.monotonic()
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > 5.0:
            self._samples.popleft()  # speed over the last few seconds, not since the start
        t0, d0 = self._samples[0]
        speed = (done - d0) / (now - t0) if now > t0 else 0.0
        total = self._total or 0
        if total:
            self.progress.setValue(min(1000, int(1000 * done / total)))
        parts = [f"{human_bytes(done)} of {human_bytes(total)}" if total else human_bytes(done)]
        if speed > 0:
            parts.append(f"{human_bytes(speed)}/s")
            if total > done:
                parts.append(f"about {_duration((total - done) / speed)} left")
        parts.append(f"file {number} of {self._files}: {filename}")
        self.detail.setText(" · ".join(parts))

    def _on_ended(self, final: DownloadState, message: str) -> None:
        cancelled = self._transfer is not None and self._transfer.cancel.is_set()
        if cancelled and final is not DownloadState.DONE:
            final, message = DownloadState.CANCELLED, "Download cancelled."
        if final is DownloadState.DONE:
            self.progress.setRange(0, 1000)
            self.progress.setValue(1000)
        elif self.progress.maximum() == 0:
            self.progress.setRange(0, 1000)
        self._set_state(final, message)
        self.finished_download.emit(final is DownloadState.DONE)

    def _set_state(self, state: DownloadState, message: str) -> None:
        self.state = state
        self.message = message
        self.status.setText(message)
        self._sync_buttons()

    def _sync_buttons(self) -> None:
        busy = self.state in (DownloadState.PLANNING, DownloadState.DOWNLOADING,
                              DownloadState.CANCELLING)
        self.start_button.setVisible(self.state is not DownloadState.DONE)
        self.start_button.setEnabled(not busy and bool(self.downloads))
        self.start_button.setText("Try again" if self.state in (
            DownloadState.FAILED, DownloadState.CANCELLED) else "Download")
        self.cancel_button.setEnabled(self.state is not DownloadState.CANCELLING)
        self.cancel_button.setText("Cancel" if busy else "Close")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"
