"""Fixtures of the packaging tests: a local model hub to download from."""

from __future__ import annotations

import json

import pytest

from tests.support.hub import LocalHub


@pytest.fixture
def local_hub(monkeypatch):
    """A started LocalHub with a small repo (two JSON files and a 24 MB weights file at
    20 MB/s); the hub client is allowed online for this test only."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    files = {"config.json": b'{"model_type": "llama"}',
             "tokenizer.json": json.dumps({"version": "1.0"}).encode(),
             "model.safetensors": bytes(range(256)) * (24 * 4096)}
    with LocalHub("parley-test/tiny-model", files, bytes_per_s=20e6) as hub:
        yield hub
