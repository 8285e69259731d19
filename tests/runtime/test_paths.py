"""Where models live: the cache folder, and the models a built app carries converted."""

from __future__ import annotations

import sys

from engine.backends.llm import gguf_convert
from engine.runtime.paths import PREBUILT_MODELS, prebuilt_models_dir


def test_from_source_there_are_no_prebuilt_models(monkeypatch):
    monkeypatch.delattr(sys, "_MEIPASS", raising=False)
    assert prebuilt_models_dir() is None


def test_a_built_app_loads_the_gguf_converted_at_build_time_and_converts_nothing(
        monkeypatch, tmp_path):
    gguf = tmp_path / "Tiny.Q4.gguf"
    gguf.write_bytes(b"GGUF" + bytes(5000))
    monkeypatch.setenv("PARLEY_CACHE_DIR", str(tmp_path / "cache"))
    name = gguf_convert.cached_folder_path(gguf).name
    carried = tmp_path / "bundle" / PREBUILT_MODELS / name
    carried.mkdir(parents=True)
    (carried / "model.safetensors").write_bytes(b"weights")
    (carried / gguf_convert.SOURCE_FILE).write_text("{}")
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path / "bundle"), raising=False)
    monkeypatch.setattr(gguf_convert, "_convert", lambda *a: (_ for _ in ()).throw(
        AssertionError("converted although the app carries the conversion")))
    assert gguf_convert.converted_folder(gguf) == carried
    assert not (tmp_path / "cache").exists()
    # An incomplete carried folder is not taken: the GGUF is converted as usual.
    (carried / gguf_convert.SOURCE_FILE).unlink()
    converted = []
    monkeypatch.setattr(gguf_convert, "_convert", lambda g, folder, p: converted.append(folder) or folder)
    assert gguf_convert.converted_folder(gguf) == tmp_path / "cache" / "models" / name
    assert converted
