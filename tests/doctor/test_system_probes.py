"""The doctor's real probes (``engine.doctor.system``) on this machine: the hub's HEAD
against a server started here on 127.0.0.1, nvidia-smi's output parsed, libraries loaded
by name, the disk found for a folder that does not exist yet, Qt started in a child."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time

import pytest

from engine.config import EngineConfig
from engine.doctor import system
from engine.doctor.readings import CommandOutput


@pytest.fixture
def head_server():
    class Quiet(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802 - the handler's name is http.server's
            self.send_response(404)  # any answer means the hub is there
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_hub_head_answers_and_refuses(head_server, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert system.hub_head(head_server, 2.0) == ""
    started = time.perf_counter()
    why = system.hub_head(f"http://127.0.0.1:{_closed_port()}", 2.0)
    assert why and "refused" in why.lower()
    assert time.perf_counter() - started < 2.5


def test_model_size_is_unknown_offline_without_asking():
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # tests/conftest.py
    started = time.perf_counter()
    assert system.model_download_bytes("openai/whisper-large-v3-turbo", 2.0) is None
    assert time.perf_counter() - started < 2.5


def test_nvidia_smi_output_is_parsed(monkeypatch):
    out = ("0, NVIDIA H200, 570.86.15, 143771, 139000\n"
           "1, NVIDIA L4, 570.86.15, [N/A], [N/A]\n")
    monkeypatch.setattr(system, "run_program", lambda args, timeout=5.0: CommandOutput(0, out, ""))
    smi = system.read_nvidia_smi()
    assert smi is not None and smi.driver == "570.86.15"
    assert [(g.index, g.name, g.total_bytes, g.free_bytes) for g in smi.gpus] == [
        (0, "NVIDIA H200", 143771 * 2**20, 139000 * 2**20), (1, "NVIDIA L4", None, None)]
    monkeypatch.setattr(system, "run_program", lambda args, timeout=5.0: None)
    monkeypatch.setattr(system, "read_text", lambda path: None)
    assert system.read_nvidia_smi() is None  # no driver at all


def test_libraries_load_by_name_or_say_why():
    assert system.load_library("libc.so.6") == ""
    assert "libparley-nothing.so.99" in system.load_library("libparley-nothing.so.99")


def test_disk_usage_of_a_folder_not_made_yet_and_folder_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f.bin").write_bytes(b"x" * 1000)
    total, used, free = system.disk_usage(tmp_path / "not" / "yet")
    assert total > 0 and 0 <= free <= total and used <= total
    assert system.folder_bytes(tmp_path) == 1000 and system.folder_bytes(tmp_path / "none") == 0


def test_this_processor_and_its_libraries():
    cpu = system.read_cpu()
    assert cpu.logical_cores == os.cpu_count() and cpu.memory_total_bytes > 0
    assert cpu.features <= set(system._X86_FLAGS.values()) | set(system._ARM_FLAGS.values())
    torch = system.read_torch()
    assert torch is not None and not torch.error and torch.version
    ort = system.read_ort()
    assert ort is not None and "CPUExecutionProvider" in ort.providers


def test_first_platform_follows_qt():
    assert system.first_platform({"QT_QPA_PLATFORM": "wayland;xcb"}, "Linux") == "wayland"
    assert system.first_platform({"QT_QPA_PLATFORM": "vnc:size=800x600"}, "Linux") == "vnc"
    assert system.first_platform({"WAYLAND_DISPLAY": "wayland-0"}, "Linux") == ""
    assert system.first_platform({}, "Linux") == "xcb"
    assert system.first_platform({}, "Darwin") == "cocoa"


def test_qt_starts_offscreen_in_a_child():
    answer = system.start_qt({**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert answer is not None and answer.platform == "offscreen", answer
    assert answer.qt.startswith("6.") and "offscreen" in answer.plugins and not answer.error


def test_sound_scan_names_the_configured_devices():
    scan = system.scan_audio(EngineConfig())
    assert scan.missing in ("", "portaudio")
    if not scan.missing and not scan.error:
        assert scan.portaudio.startswith("PortAudio")
        assert [c.kind for c in scan.configured] == ["input", "output"]
