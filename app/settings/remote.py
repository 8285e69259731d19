"""The remote servers the settings name (``stt``/``llm``/``tts`` ``base_url``), probed off
the GUI thread on a latest-wins lane: a probe of settings edited since supersedes the
one running, whose answer is dropped."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.core.background import Failure, JobKind, LatestLane
from engine.config import EngineConfig
from engine.runtime.devices import Device, DeviceInfo

#: Stages that can run on a remote server, and the settings whose edits probe it again.
REMOTE_STAGES = ("stt", "llm", "tts")
PROBE_KEYS = ("base_url", "api_key_env", "timeout_s")
REMOTE = Device("remote")


class RemoteProbe(QObject):
    """Which server each stage names, and what probing it found (``infos``)."""

    probed = Signal(object)  # {stage: DeviceInfo} of the servers last probed

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.infos: dict[str, DeviceInfo] = {}  # stage -> its probed server
        self.urls: dict[str, str] = {}  # stage -> base_url being probed or probed
        self._lane = LatestLane(self, "parley-remote-probe")

    def probe(self, config: EngineConfig) -> None:
        """Probe the servers ``config`` names; ``probed`` follows unless a newer probe (or
        a config naming none) supersedes this one."""
        urls = {s: config.stage_config(s).base_url.strip() for s in REMOTE_STAGES
                if config.stage_config(s).base_url.strip()}
        self.urls = urls
        self.infos = {s: info for s, info in self.infos.items() if s in urls}
        if not urls:
            self._lane.drop()
            return

        def probe() -> dict[str, DeviceInfo]:
            from engine.backends.remote_probe import discover_remote

            return {i.stages[0]: i for i in discover_remote(config)}

        def failed(failure: Failure) -> None:  # shown in the dropdowns, never raised
            self._found({s: DeviceInfo(REMOTE, urls[s], False, f"probe failed: {failure.error}",
                                       stages=(s,)) for s in urls})

        self._lane.call(JobKind.PROBE, probe, self._found, failed)

    def entries(self, stage: str | None) -> list[DeviceInfo]:
        """The stage's server, as probed (or being probed), if its base_url is set."""
        if stage not in REMOTE_STAGES or stage not in self.urls:
            return []
        info = self.infos.get(stage)
        if info is None:
            url = self.urls[stage]
            return [DeviceInfo(REMOTE, f"{url} (checking…)", False,
                               f"checking {url}: is it reachable, does it list the model?",
                               stages=(stage,))]
        return [info]

    def wait(self, timeout: float) -> bool:
        """Wait for a running probe's thread to end (closing, tests); True if none runs."""
        return self._lane.join(timeout)

    def _found(self, infos: dict[str, DeviceInfo]) -> None:
        self.infos = dict(infos)
        self.probed.emit(dict(self.infos))
