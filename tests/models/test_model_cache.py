"""The model cache: what is on disk (hub, Parley's cache, bundled), sizes, which stage
uses what, and removal that refuses a model a loaded stage uses."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from engine.models.model_cache import (BUNDLED, HUB, PARLEY, ModelCacheError, ModelInUseError, ModelUse,
                                        engine_uses, remove_model, scan_models, uses_of)
from tests.support.hub import REV, make_hub_repo


@pytest.fixture
def caches(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    hub.mkdir()
    parley = tmp_path / "parley"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("PARLEY_CACHE_DIR", str(parley))
    make_hub_repo(hub, "org/tiny-stt", {"config.json": 100, "model.bin": 5000})
    make_hub_repo(hub, "rhasspy/piper-voices", {"voice.onnx": 2000})
    gguf = tmp_path / "pkg" / "Small.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"g" * 10)
    conv = parley / "models" / "Small-0123456789ab"
    conv.mkdir(parents=True)
    (conv / "model.safetensors").write_bytes(b"s" * 3000)
    (conv / "parley_source.json").write_text(json.dumps({"gguf": str(gguf)}))
    (parley / "models" / ".Small-x.tmp-1").mkdir()  # a conversion in progress: not listed
    return {"hub": hub, "parley": parley, "gguf": gguf, "conv": conv}


def test_scan_lists_hub_and_parley_cache_with_sizes(caches):
    scan = scan_models(bundled=False)
    by_name = {m.name: m for m in scan.models}
    assert set(by_name) == {"org/tiny-stt", "rhasspy/piper-voices", "Small-0123456789ab"}
    assert by_name["org/tiny-stt"].kind == HUB and by_name["org/tiny-stt"].size_bytes == 5100
    assert by_name["org/tiny-stt"].revisions == (REV,)
    assert by_name["Small-0123456789ab"].kind == PARLEY
    assert by_name["Small-0123456789ab"].size_bytes == 3000 + len(
        (caches["conv"] / "parley_source.json").read_bytes())
    assert scan.total_bytes == sum(m.size_bytes for m in scan.models)
    assert scan.hub_cache == caches["hub"]
    data = json.loads(json.dumps(scan.as_dict()))
    assert {"name", "kind", "size_bytes", "used_by", "removable"} <= set(data["models"][0])


def test_used_by_matches_repo_ids_files_and_gguf_sources(caches):
    uses = [ModelUse("stt", "org/tiny-stt"),
            ModelUse("tts", "rhasspy/piper-voices:en/voice.onnx", loaded=False),
            ModelUse("llm", str(caches["gguf"]))]
    scan = scan_models(uses, bundled=False)
    by_name = {m.name: m for m in scan.models}
    assert by_name["org/tiny-stt"].used_by == ("stt",)
    assert by_name["rhasspy/piper-voices"].used_by == ("tts",)
    assert by_name["rhasspy/piper-voices"].loaded_by == ()
    assert by_name["Small-0123456789ab"].loaded_by == ("llm",)


def test_uses_of_placements_dicts_and_engine():
    class P:
        def __init__(self, stage, model):
            self.stage, self.model = stage, model

    engine = SimpleNamespace(placements={"stt": P("stt", "org/a"), "llm": P("llm", "org/b")},
                             models={"stt": object()})
    assert engine_uses(engine) == [ModelUse("stt", "org/a", True), ModelUse("llm", "org/b", False)]
    assert uses_of([{"stage": "tts", "model": "x/y"}]) == [ModelUse("tts", "x/y", True)]
    assert engine_uses(None) == []


def test_remove_refuses_a_loaded_model_then_removes_when_forced_or_unused(caches):
    scan = scan_models([ModelUse("stt", "org/tiny-stt")], bundled=False)
    stt = scan.find("org/tiny-stt")
    with pytest.raises(ModelInUseError, match="stt"):
        remove_model(stt)
    assert stt.path.exists()
    assert remove_model(stt, force=True) == 5100
    assert not stt.path.exists()
    conv = scan.find("Small-0123456789ab")
    remove_model(conv)
    assert not caches["conv"].exists()
    assert {m.name for m in scan_models(bundled=False).models} == {"rhasspy/piper-voices"}


def test_unknown_names_and_bundled_models_are_refused(caches):
    scan = scan_models(bundled=False)
    with pytest.raises(ModelCacheError, match="no cached model 'org/missing'"):
        scan.find("org/missing")
    from engine.models.model_cache import CachedModel

    bundled = CachedModel("silero_vad/x.onnx", BUNDLED, caches["gguf"], 10, source="silero_vad")
    with pytest.raises(ModelCacheError, match="pip uninstall"):
        remove_model(bundled)
    assert caches["gguf"].exists()


def test_missing_caches_give_an_empty_list(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    monkeypatch.setenv("PARLEY_CACHE_DIR", str(tmp_path / "none2"))
    assert scan_models(bundled=False).models == ()


def test_bundled_models_are_listed_read_only(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    scan = scan_models()
    bundled = [m for m in scan.models if m.kind == BUNDLED]
    if not bundled:
        pytest.skip("no bundled model package installed")
    assert all(not m.removable and m.size_bytes > 0 for m in bundled)


def test_cli_models_list_json_and_remove(caches, capsys):
    from engine.cli.main import main

    assert main(["models", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {m["name"] for m in data["models"] if m["kind"] != BUNDLED} == {
        "org/tiny-stt", "rhasspy/piper-voices", "Small-0123456789ab"}
    assert main(["models", "remove", "org/tiny-stt"]) == 0
    assert "org/tiny-stt" in capsys.readouterr().out
    assert main(["models", "remove", "org/tiny-stt"]) == 2
    assert "no cached model" in capsys.readouterr().err
