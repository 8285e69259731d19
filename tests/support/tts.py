"""Test helpers for the TTS backends: a random Kokoro model folder, and Whisper reading
speech back. (The built folder and Whisper tiny.en are fixtures: ``random_kokoro_dir`` in
tests/backends/conftest.py, ``whisper_tiny_en`` in tests/conftest.py.)"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

# Phoneme characters misaki emits for English, plus punctuation and space: every one gets
# an id, so no phoneme of a test sentence is dropped by KModel's vocabulary filter.
_KOKORO_SYMBOLS = (';:,.!?—…"()“” ' + "AIOQSTWY" + "abcdefhijklmnopqrstuvwxyz"
                   + "ɑɐɒæβɔɕçɖðʤəɚɛɜɟɡɥɨɪʝɯɰŋɳɲɴøɸθœɹɾɻʁɽʂʃʈʧʊʋʌɣɤχʎʒʔˈˌːʰʲ↓→↗↘ᵻᵊ")

#: Frames per input token of the random Kokoro at speed 1, and audio samples per frame.
KOKORO_FRAMES_PER_TOKEN = 4
KOKORO_SAMPLES_PER_FRAME = 600  # 2x upsampling in the decoder, then 10 * 6 * 5 in iSTFTNet


def kokoro_config() -> dict:
    """Kokoro-82M's architecture with a tiny PL-BERT, one predictor layer and one
    resblock kernel (the decoder's 1024/512 channels are fixed in kokoro's code)."""
    vocab = {ch: i + 1 for i, ch in enumerate(dict.fromkeys(_KOKORO_SYMBOLS))}
    return {
        "vocab": vocab, "n_token": 178, "hidden_dim": 512, "style_dim": 128, "n_layer": 1,
        "max_dur": 50, "dropout": 0.2, "text_encoder_kernel_size": 5, "n_mels": 80,
        "plbert": {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64,
                   "max_position_embeddings": 512, "num_hidden_layers": 1, "dropout": 0.1},
        "istftnet": {"upsample_kernel_sizes": [20, 12], "upsample_rates": [10, 6],
                     "gen_istft_hop_size": 5, "gen_istft_n_fft": 20,
                     "resblock_dilation_sizes": [[1, 3, 5]], "resblock_kernel_sizes": [3],
                     "upsample_initial_channel": 512},
    }


def build_random_kokoro(folder: Path, voice: str = "af_heart", seed: int = 0) -> Path:
    """Save a randomly initialised KModel as a Kokoro folder: config.json, model.pth (a
    state dict per submodule, as in kokoro-v1_0.pth) and voices/<voice>.pt.

    The duration head is set so that every token lasts exactly
    KOKORO_FRAMES_PER_TOKEN frames at speed 1 (sigmoid(b) * 50 = 4.2 -> 4; 2 at speed 2),
    which makes the audio length a known function of the phoneme count.
    """
    import torch
    from kokoro import KModel

    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    config = kokoro_config()
    (folder / "config.json").write_text(json.dumps(config, ensure_ascii=False), "utf-8")
    empty = folder / "empty.pth"
    torch.save({}, empty)  # KModel loads nothing from it: the weights stay random
    model = KModel(repo_id="parley/random-kokoro", config=config, model=str(empty))
    empty.unlink()
    head = model.predictor.duration_proj.linear_layer
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(math.log(0.084 / (1 - 0.084)))
    parts = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
    torch.save({name: getattr(model, name).state_dict() for name in parts}, folder / "model.pth")
    (folder / "voices").mkdir(exist_ok=True)
    torch.save(torch.randn(510, 1, 2 * config["style_dim"]) * 0.15,
               folder / "voices" / f"{voice}.pt")
    return folder



def transcribe(whisper, audio: np.ndarray, sample_rate: int) -> str:
    """What Whisper hears in ``audio``: lower case, letters and spaces only."""
    import soxr

    audio16k = soxr.resample(audio.astype(np.float32), sample_rate, 16000)
    segments, _ = whisper.transcribe(audio16k, language="en", beam_size=1, temperature=0.0,
                                     condition_on_previous_text=False)
    text = " ".join(segment.text for segment in segments).lower()
    return " ".join("".join(ch if ch.isalpha() or ch == "'" else " " for ch in text).split())


def french_piper_voice(joe: str, folder: Path) -> Path:
    """A French Piper voice file for tests, as a catalogue voice (``fr_FR-...``) would be:
    the bundled voice's network (``joe``, its ``.onnx`` path) with a config that asks
    espeak-ng for French phonemes and says the voice speaks fr. It speaks French words
    with joe's accent (Whisper base still hears English in it), so tests check the voice
    chosen and that its audio is speech, not the accent."""
    french = folder / "fr_FR-joe-medium.onnx"
    french.write_bytes(Path(joe).read_bytes())
    config = json.loads(Path(joe + ".json").read_text("utf-8"))
    config["espeak"]["voice"] = "fr"
    config["language"] = {"code": "fr_FR", "family": "fr"}
    Path(str(french) + ".json").write_text(json.dumps(config), "utf-8")
    return french
