"""Packaging: resources from source and frozen, the icon files, the platform manifests, the
first-run download dialog, and (opt-in, slow) a real PyInstaller build that must pass its
own ``--self-test`` in a clean environment.

The build test runs only with PARLEY_TEST_PACKAGE=1 (CI runs it as its own step); it is
marked ``package``.
"""

from __future__ import annotations

import configparser
import os
import plistlib
import struct
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from app.core.resources import ICON_SIZES, app_icon, resource_path
from engine.errors import ParleyError


ROOT = Path(__file__).resolve().parents[2]
ICONS = ROOT / "resources" / "icons"
PACKAGING = ROOT / "packaging"
SAMPLE = ("audio", "one_two_three_44k.wav")
PNG = b"\x89PNG\r\n\x1a\n"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _import_packaging(name: str):
    """A module of packaging/ (scripts, not a package)."""
    import importlib.util

    folder = PACKAGING / ("windows" if name == "version_info" else "")
    spec = importlib.util.spec_from_file_location(f"_packaging_{name}", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(folder))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


def _png_dims(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


# ------------------------------------------------------------------ resource_path
def test_resource_path_from_source_finds_the_sample_recording():
    path = resource_path(*SAMPLE)
    assert path == ROOT / "resources" / "audio" / "one_two_three_44k.wav"
    assert path.stat().st_size > 200_000
    assert resource_path() == ROOT / "resources"


def test_resource_path_prefers_the_frozen_bundle(tmp_path, monkeypatch):
    frozen = tmp_path / "_internal"
    (frozen / "resources" / "audio").mkdir(parents=True)
    (frozen / "resources" / "audio" / "one_two_three_44k.wav").write_bytes(b"frozen copy")
    monkeypatch.setattr(sys, "_MEIPASS", str(frozen), raising=False)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert resource_path(*SAMPLE) == frozen / "resources" / "audio" / "one_two_three_44k.wav"
    # Something only the source tree has is still found there (a partial bundle).
    assert resource_path("audio", "SOURCES.md") == ROOT / "resources" / "audio" / "SOURCES.md"


def test_resource_path_finds_a_mac_bundles_resources_folder(tmp_path, monkeypatch):
    contents = tmp_path / "Parley.app" / "Contents"
    (contents / "MacOS").mkdir(parents=True)
    (contents / "Frameworks").mkdir()
    (contents / "Resources" / "resources" / "icons").mkdir(parents=True)
    icon = contents / "Resources" / "resources" / "icons" / "only-in-the-app.png"
    icon.write_bytes(PNG)
    monkeypatch.setattr(sys, "_MEIPASS", str(contents / "Frameworks"), raising=False)
    monkeypatch.setattr(sys, "executable", str(contents / "MacOS" / "Parley"))
    assert resource_path("icons", "only-in-the-app.png") == icon


def test_a_missing_resource_names_the_folders_searched(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    with pytest.raises(ParleyError) as err:
        resource_path("audio", "no-such.wav")
    assert "audio/no-such.wav" in str(err.value)
    assert str(tmp_path / "resources") in str(err.value)
    assert str(ROOT / "resources") in str(err.value)


@pytest.mark.parametrize("parts", [("..", "pyproject.toml"), ("/etc/passwd",), ("",)])
def test_resource_path_refuses_paths_that_leave_the_folder(parts):
    with pytest.raises(ParleyError, match="plain relative names"):
        resource_path(*parts)


def test_app_icon_has_every_size(qapp):
    icon = app_icon()
    assert not icon.isNull()
    assert sorted(s.width() for s in icon.availableSizes()) == list(ICON_SIZES)
    assert app_icon() is icon  # loaded once
    pixmap = icon.pixmap(64, 64)
    assert pixmap.width() == 64 and not pixmap.toImage().isNull()


# ------------------------------------------------------------------ icon files
@pytest.mark.parametrize("size", ICON_SIZES)
def test_icon_png_exists_in_each_size(size):
    data = (ICONS / f"parley-{size}.png").read_bytes()
    assert _png_dims(data) == (size, size)


def test_the_master_svg_is_a_square_svg_qt_renders():
    root = ET.parse(ICONS / "parley.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert root.get("viewBox") == "0 0 1024 1024"
    from PySide6.QtSvg import QSvgRenderer

    for name in ("parley.svg", "parley-small.svg"):
        assert QSvgRenderer(str(ICONS / name)).isValid(), name


@pytest.mark.parametrize("size", [16, 128])
def test_committed_pngs_match_the_svg(qapp, size):
    """A changed SVG needs `python packaging/make_icons.py`: stale PNGs fail here."""
    from PySide6.QtGui import QImage

    make_icons = _import_packaging("make_icons")
    svg = ICONS / ("parley-small.svg" if size <= make_icons.SMALL_MAX else "parley.svg")
    fresh = QImage.fromData(make_icons.render(svg, size))
    committed = QImage(str(ICONS / f"parley-{size}.png"))
    diff = sum(abs(fresh.pixelColor(x, y).alpha() - committed.pixelColor(x, y).alpha())
               + abs(fresh.pixelColor(x, y).blue() - committed.pixelColor(x, y).blue())
               for x in range(size) for y in range(size))
    assert diff / (size * size) < 3, "resources/icons PNGs are stale: run packaging/make_icons.py"


def test_ico_container_parses_with_png_entries_of_the_declared_sizes():
    data = (ICONS / "parley.ico").read_bytes()
    reserved, kind, count = struct.unpack_from("<HHH", data, 0)
    assert (reserved, kind) == (0, 1) and count == 7
    sizes = []
    for i in range(count):
        w, h, colors, _res, planes, bits, length, offset = struct.unpack_from("<BBBBHHII", data, 6 + 16 * i)
        size = w or 256
        assert (w, colors, planes, bits) == (h, 0, 1, 32)
        assert offset + length <= len(data)
        assert _png_dims(data[offset:offset + length]) == (size, size)
        sizes.append(size)
    assert sizes == [16, 24, 32, 48, 64, 128, 256]


def test_icns_container_parses_with_the_retina_set():
    data = (ICONS / "parley.icns").read_bytes()
    assert data[:4] == b"icns"
    assert struct.unpack(">I", data[4:8])[0] == len(data)
    expected = {"icp4": 16, "icp5": 32, "icp6": 64, "ic07": 128, "ic08": 256, "ic09": 512,
                "ic10": 1024, "ic11": 32, "ic12": 64, "ic13": 256, "ic14": 512}
    found, pos = {}, 8
    while pos < len(data):
        kind = data[pos:pos + 4].decode("ascii")
        length = struct.unpack(">I", data[pos + 4:pos + 8])[0]
        assert length > 8 and pos + length <= len(data)
        found[kind] = _png_dims(data[pos + 8:pos + length])[0]
        pos += length
    assert pos == len(data)
    assert found == expected


def test_icon_writers_refuse_a_png_of_the_wrong_size():
    iconfiles = _import_packaging("iconfiles")
    png16 = (ICONS / "parley-16.png").read_bytes()
    with pytest.raises(ValueError, match="32 px"):
        iconfiles.ico_bytes({32: png16})
    with pytest.raises(ValueError, match="not a PNG"):
        iconfiles.icns_bytes({16: b"GIF89a" + bytes(40)})


# ------------------------------------------------------------------ platform manifests
def test_info_plist_is_valid_and_names_the_icon_and_microphone_use():
    info = plistlib.loads((PACKAGING / "macos" / "Info.plist").read_bytes())
    assert info["CFBundleIdentifier"] == "org.parley.Parley"
    assert len(info["NSMicrophoneUsageDescription"]) > 30
    assert info["CFBundleIconFile"] == "parley.icns"
    assert (ICONS / info["CFBundleIconFile"]).is_file()
    assert info["CFBundleShortVersionString"] == VERSION
    assert info["NSHighResolutionCapable"] is True


def test_entitlements_allow_the_microphone_under_the_hardened_runtime():
    ent = plistlib.loads((PACKAGING / "macos" / "entitlements.plist").read_bytes())
    assert ent["com.apple.security.device.audio-input"] is True
    assert "com.apple.security.app-sandbox" not in ent


def test_desktop_entry_has_exec_icon_name_and_categories():
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # keys are case-sensitive
    parser.read(PACKAGING / "linux" / "parley.desktop", encoding="utf-8")
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Name"] == "Parley"
    assert entry["Exec"].split()[0] == "parley"
    assert (ICONS / f"{entry['Icon']}-256.png").is_file() and (ICONS / f"{entry['Icon']}.svg").is_file()
    categories = entry["Categories"].split(";")
    assert categories[-1] == "" and "AudioVideo" in categories  # Audio needs its main category
    assert entry["Terminal"] == "false"


def test_windows_version_resource_carries_the_project_version():
    version_info = _import_packaging("version_info")
    assert version_info.version_tuple("0.1.0") == (0, 1, 0, 0)
    calls = []

    def record(name):
        return lambda *args, **kwargs: calls.append((name, args, kwargs)) or name

    names = ("VSVersionInfo", "FixedFileInfo", "StringFileInfo", "StringTable", "StringStruct",
             "VarFileInfo", "VarStruct")
    result = eval(version_info.version_info_text(VERSION), {n: record(n) for n in names})  # noqa: S307
    assert result == "VSVersionInfo"
    strings = {args[0]: args[1] for name, args, _kw in calls if name == "StringStruct"}
    assert strings["ProductVersion"] == VERSION and strings["OriginalFilename"] == "Parley.exe"
    fixed = next(kw for name, _a, kw in calls if name == "FixedFileInfo")
    assert fixed["filevers"] == version_info.version_tuple(VERSION)


def test_the_spec_and_scripts_parse():
    compile((PACKAGING / "parley.spec").read_text(), "parley.spec", "exec")
    for script in ("build.py", "make_icons.py", "iconfiles.py", "entry.py"):
        compile((PACKAGING / script).read_text(), script, "exec")


def test_build_runs_the_app_in_a_clean_environment(monkeypatch):
    build = _import_packaging("build")
    monkeypatch.setenv("VIRTUAL_ENV", str(ROOT / ".venv"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    env = build.clean_env({"PARLEY_CACHE_DIR": "/tmp/x"})
    assert "VIRTUAL_ENV" not in env and "PYTHONPATH" not in env
    assert env["HF_HUB_OFFLINE"] == "1" and env["PARLEY_CACHE_DIR"] == "/tmp/x"
    if sys.platform.startswith("linux"):
        assert env["PATH"] == "/usr/bin:/bin"
        assert build.executable() == ROOT / "dist" / "Parley" / "Parley"
    assert build.human(1536 * 2**20) == "1.5 GiB"


# ------------------------------------------------------------------ first run
def test_download_patterns_match_what_the_backends_fetch():
    from app.onboarding.downloads import HUB_PATTERNS
    from engine.backends.llm import model_folder
    from engine.backends.stt import mlx_whisper

    assert list(HUB_PATTERNS["transformers"]) == model_folder._HUB_FILES
    assert list(HUB_PATTERNS["mlx-whisper"]) == mlx_whisper._HUB_FILES


def test_offline_notice_names_the_bundled_models():
    from app.onboarding.downloads import hub_downloads, offline_notice
    from engine.config import EngineConfig
    from engine.runtime.hub import HubStatus
    from engine.models.placement import resolve_placements

    placements = resolve_placements(EngineConfig(device="cpu"), hub=HubStatus(offline=True))
    notice = offline_notice(placements.values())
    assert notice.startswith("Parley is using the bundled offline models:")
    assert "Whisper tiny.en" in notice and "SmolLM2-135M-Instruct" in notice
    assert "Silero" not in notice  # the VAD is always bundled: not news
    wanted = {d.stage: d for d in hub_downloads(placements.values())}
    assert set(wanted) == {"stt", "llm", "tts"}
    assert wanted["llm"].repo_id == placements["llm"].spec.hub_model("cpu")
    if placements["tts"].backend == "piper":  # one voice of a repo of hundreds
        assert wanted["tts"].patterns[1] == wanted["tts"].patterns[0] + ".json"
        assert wanted["tts"].label.endswith(".onnx)")
    hub_placed = [p for p in placements.values() if not p.bundled] or None
    assert offline_notice(hub_placed or []) is None


def _wait_for(qapp, condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        qapp.processEvents()
        time.sleep(0.01)
    qapp.processEvents()


def test_download_dialog_offline_shows_a_clear_message_and_the_worker_ends(qapp, tmp_path):
    from app.onboarding.downloads import DownloadState, HubDownload, ModelDownloadDialog

    wanted = [HubDownload("llm", "HuggingFaceTB/SmolLM2-360M-Instruct", ("*.json",))]
    dialog = ModelDownloadDialog(wanted, cache_dir=str(tmp_path))
    finished = []
    dialog.finished_download.connect(finished.append)
    dialog.start()
    assert dialog.state is DownloadState.PLANNING and dialog.cancel_button.text() == "Cancel"
    assert dialog.wait(30), "the download thread did not end"
    _wait_for(qapp, lambda: finished)
    assert finished == [False]
    assert dialog.state is DownloadState.FAILED
    assert "HF_HUB_OFFLINE" in dialog.message and "SmolLM2-360M-Instruct" in dialog.message
    assert dialog.status.text() == dialog.message
    assert dialog.start_button.text() == "Try again" and dialog.cancel_button.text() == "Close"
    assert not list(tmp_path.rglob("*.incomplete"))


def test_cancel_sets_the_state_and_the_worker_thread_ends(qapp, tmp_path):
    from app.onboarding.downloads import DownloadState, HubDownload, ModelDownloadDialog

    wanted = [HubDownload("stt", "mobiuslabsgmbh/faster-whisper-large-v3-turbo", ("model.bin",))]
    dialog = ModelDownloadDialog(wanted, cache_dir=str(tmp_path))
    dialog.start()
    dialog.cancel()
    assert dialog.state is DownloadState.CANCELLING
    assert not dialog.cancel_button.isEnabled()
    assert dialog.wait(30) and not dialog.running
    _wait_for(qapp, lambda: dialog.state is not DownloadState.CANCELLING)
    # Cancelled wins over the offline error that ended the worker: the user asked to stop.
    assert dialog.state is DownloadState.CANCELLED and dialog.message == "Download cancelled."
    assert dialog.cancel_button.isEnabled() and dialog.cancel_button.text() == "Close"


def test_a_cancelled_transfer_stops_at_the_next_chunk():
    from app.onboarding.downloads import DownloadCancelled, HubDownload, _Transfer

    transfer = _Transfer([HubDownload("llm", "org/model", None)], None, None)
    bar = transfer.bar_class()(total=100, desc="model.safetensors")
    bar.update(40)
    assert transfer.done_bytes == 40
    transfer.cancel.set()
    with pytest.raises(DownloadCancelled):
        bar.update(10)
    assert transfer.done_bytes == 40
    bar.close()


def test_download_dialog_fetches_a_repo_from_a_local_hub(qapp, tmp_path, local_hub):
    from huggingface_hub import snapshot_download

    from app.onboarding.downloads import DownloadState, HubDownload, ModelDownloadDialog

    repo = local_hub.repo_id
    dialog = ModelDownloadDialog([HubDownload("llm", repo, ("*.json", "*.safetensors"))],
                                 cache_dir=str(tmp_path), endpoint=local_hub.url)
    finished = []
    dialog.finished_download.connect(finished.append)
    dialog.start()
    _wait_for(qapp, lambda: finished)
    assert finished == [True] and dialog.state is DownloadState.DONE, dialog.message
    assert dialog.message == "Downloaded 3 files (25.2 MB)."
    assert dialog.progress.value() == 1000
    assert "of 25.2 MB" in dialog.detail.text() and "MB/s" in dialog.detail.text()
    # In the standard cache layout, where the backends look (offline from now on).
    folder = Path(snapshot_download(repo, cache_dir=str(tmp_path), local_files_only=True))
    for name, data in local_hub.files.items():
        assert (folder / name).read_bytes() == data
    # A second run finds everything cached and fetches nothing.
    again = ModelDownloadDialog([HubDownload("llm", repo, None)], cache_dir=str(tmp_path),
                                endpoint=local_hub.url)
    again.start()
    assert again.wait(30)
    _wait_for(qapp, lambda: again.state is DownloadState.DONE)
    assert again.message.startswith("Every file is already in the cache")
    assert len(local_hub.gets) == 3


def test_cancel_stops_a_transfer_midway_and_try_again_completes_it(qapp, tmp_path, local_hub):
    from app.onboarding.downloads import DownloadState, HubDownload, ModelDownloadDialog

    # 64 MB at 32 MB/s: 2 s in all. huggingface_hub reads 10 MB chunks, so Cancel pressed
    # after the first chunk stops the transfer at the second, 20 MB in.
    local_hub.files["model.safetensors"] = bytes(range(256)) * (64 * 4096)
    local_hub.bytes_per_s = 32e6
    total = len(local_hub.files["model.safetensors"])
    dialog = ModelDownloadDialog([HubDownload("llm", local_hub.repo_id, ("*.safetensors",))],
                                 cache_dir=str(tmp_path), endpoint=local_hub.url)
    dialog.start()
    _wait_for(qapp, lambda: dialog._transfer.done_bytes > 0)  # the first chunk arrived
    cancelled_at = time.monotonic()
    dialog.cancel()
    assert dialog.wait(10)
    stopped_after = time.monotonic() - cancelled_at
    _wait_for(qapp, lambda: dialog.state is DownloadState.CANCELLED)
    assert stopped_after < 1.0, f"{stopped_after:.2f} s: the rest of the file would take ~1.4 s"
    assert 0 < dialog._transfer.done_bytes <= 20 * 2**20
    assert local_hub.bytes_sent < total * 0.6  # the client hung up: the rest was never sent
    # huggingface_hub drops the partial file: the cache holds nothing half-written.
    assert not list(tmp_path.rglob("*.incomplete"))
    assert not list(tmp_path.rglob("snapshots/*/model.safetensors"))
    assert dialog.start_button.text() == "Try again"

    dialog.start()
    _wait_for(qapp, lambda: dialog.state is DownloadState.DONE)
    assert [name for name, _start in local_hub.gets] == ["model.safetensors"] * 2
    (blob,) = tmp_path.rglob("snapshots/*/model.safetensors")
    assert blob.read_bytes() == local_hub.files["model.safetensors"]


# ------------------------------------------------------------------ the real build (opt-in)
@pytest.mark.package
@pytest.mark.skipif(os.environ.get("PARLEY_TEST_PACKAGE") != "1",
                    reason="builds the app with PyInstaller (minutes); set PARLEY_TEST_PACKAGE=1")
def test_built_app_passes_its_self_test_in_a_clean_environment(tmp_path):
    build = _import_packaging("build")
    figures = build.build()
    print(f"\nbuilt {figures['app']} in {figures['build_s']} s, {figures['size']}")
    assert build.executable().is_file()
    # First start on a machine that never ran Parley: the app carries the GGUF LLM's
    # ONNX conversion made at build time, so nothing converts into the user's cache.
    cache = tmp_path / "cache"
    first = build.run_self_test(env_extra={"PARLEY_CACHE_DIR": str(cache)})
    assert first["exit_status"] == 0 and first["ok"], first
    assert first["frozen"] is True
    assert first["llm_cache"]["converted_before"] is True
    assert first["llm_cache"]["carried_by_app"] is True
    assert first["llm_cache"]["backend"] == "onnx-genai"
    # Second start: the everyday launch; still nothing written to the cache for the LLM.
    second = build.run_self_test(env_extra={"PARLEY_CACHE_DIR": str(cache)})
    assert second["exit_status"] == 0 and second["ok"], second
    assert second["llm_cache"]["carried_by_app"] is True
    assert not list(cache.glob("models/*/model.*")), "the LLM was converted into the cache"
    from app.selftest import normalize_words

    assert "one two three" in normalize_words(second["transcript"])
    assert second["reply"].strip() and second["launch_to_first_reply_audio_s"] > 0
    assert {p["stage"]: p["actual_device"] for p in second["placements"]} == {
        "vad": "cpu", "stt": "cpu", "llm": "cpu", "tts": "cpu"}
    print(f"first launch: first reply audio after "
          f"{first['launch_to_first_reply_audio_s']} s; later launches: "
          f"{second['launch_to_first_reply_audio_s']} s")
