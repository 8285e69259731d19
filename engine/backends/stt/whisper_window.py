"""Whisper encoded at the audio's own length (``stt.window = fit``), on faster-whisper's model.

faster-whisper pads every call to Whisper's 30 s window, and on a CPU most of a short
turn's time goes into encoding that padding: tiny.en int8 on 2 cores encodes 3000 frames
(30 s) in ~200-370 ms and 1000 frames (10 s) in ~35 ms. CTranslate2's Whisper encoder
accepts shorter inputs, so this path computes the log-mel features of the audio alone,
pads them with 0.5 s and then up to a minimum window, and encodes only that.

Whisper was trained on 30 s windows only, and its decoder reads all 1500 encoder
positions: handed the short encoding alone it misheard more (tiny.en, 240 renderings of
the spoken test set: 6.4 % WER with a 5 s window against 3.5 % for 30 s) and looped below
a few seconds ("and so and so and so..." on 1-2 s of jfk.flac). So the encoder output is
completed to 1500 positions with the encoding of 30 s of silence, computed once: the
decoder then sees what it was trained on after the speech (4.0 % WER with a 10 s window,
against 3.5 % for the 30 s one; ``stt.min_window_s``). The decode is bounded by the
audio's duration.

What it keeps from faster-whisper's ``transcribe`` (temperature 0, no timestamps, no
earlier text): the prompt (``<|startoftranscript|>`` [language ``<|transcribe|>``]
``<|notimestamps|>``), the suppressed tokens, and the no-speech rule (no_speech_prob
> 0.6 with an average log-probability < -1 gives no words). A multilingual model with no
language set detects it on the same encoder output; when its first choice is below 0.5 the
call goes to the 30 s window, which detects as faster-whisper does.

When the output looks like a loop (the token bound reached, gzip compression above
faster-whisper's 2.4, or a word or phrase repeated back to back: 1 s of "Hello." in a
short window came out as "Hello? Hello?"), ``transcribe`` returns None and the caller
decodes the 30 s window instead; so does audio longer than 30 s.

So does an unsure decode: one whose average log-probability is below
``UNSURE_LOGPROB``. Some short clips at some sub-frame alignments come out of the fitted
window garbled with the decoder's own doubt on them: "Wait, tell me a joke instead."
shifted by 44 ms (as a loaded server cut it) decoded as "Wait, tell me that you're a good
guy." at -0.84, where the 30 s window heard it at -0.36. On the spoken test set and the
four framework questions, with and without Piper's noise, each cut by the real VAD at four
sub-frame leads (280 segments, 1976 words), the fitted decodes scored -0.04 to -0.39
(median -0.10) and the ones with errors -0.13 to -0.39; below -0.3, 11 of 280 segments
(3.9 %) go to the 30 s window and the WER drops from 2.94 % to 2.53 % (30 s everywhere:
2.38 %). Each such turn pays one 30 s decode more (~200-370 ms on 2 cores).

Random weights (``parley-cli bench --weights random``, and nothing else) never stop and are
never sure, so every decode of theirs would loop to its bound and go to the 30 s window,
which a real model does on a few turns in a hundred. ``FittedWhisper.timing_random_weights``
gives the bench a copy that keeps every fitted decode at a real transcript's length, so the
bench times the window the real model uses on most turns. No setting reaches it.
"""

from __future__ import annotations

import math
import threading
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from faster_whisper import WhisperModel
    from faster_whisper.tokenizer import Tokenizer

SAMPLE_RATE = 16000
FRAMES_PER_SECOND = 100  # 10 ms hop
MAX_FRAMES = 3000  # Whisper's 30 s: its encoder has 1500 positions after the stride-2 conv
#: Silence encoded after the speech however long it is: without it the last word of a
#: window that ends on speech was misheard more often (tiny.en, the spoken test set).
TAIL_PAD_FRAMES = 50
#: Decode at most this many tokens per second of audio, plus the slack: fast English is
#: ~4 words/s, ~1.3 tokens a word with punctuation.
TOKENS_PER_SECOND = 7.0
TOKEN_SLACK = 10
#: faster-whisper's thresholds (its ``transcribe`` defaults).
NO_SPEECH_THRESHOLD = 0.6
LOG_PROB_THRESHOLD = -1.0
COMPRESSION_RATIO_THRESHOLD = 2.4
#: Below this probability of its first choice, the language is detected on the 30 s
#: window instead (faster-whisper's ``language_detection_threshold``). Whisper base on
#: English: 0.59-1.00 on fitted windows, 0.69-0.99 on 30 s ones (the spoken test set,
#: jfk.flac, one_two_three, 1 s of jfk).
LANGUAGE_THRESHOLD = 0.5
#: A fitted decode whose average log-probability is below this is decoded again on the
#: 30 s window (the measurement is in the module's docstring).
UNSURE_LOGPROB = -0.3
#: Whisper reads at most half its 448-token context as earlier text (faster-whisper's
#: ``initial_prompt`` keeps the last 223 tokens).
MAX_PREVIOUS_TOKENS = 223


def language_probabilities(detected: list[tuple[str, float]]) -> tuple[tuple[str, float], ...]:
    """CTranslate2's ``Whisper.detect_language`` result for one audio (``("<|fr|>", p)``
    pairs, the most likely first, all languages) as ``("fr", p)`` pairs."""
    return tuple((token[2:-2], float(probability)) for token, probability in detected)


def decode_budget(seconds: float) -> int:
    """The most new tokens a decode of ``seconds`` of audio may produce."""
    return TOKEN_SLACK + math.ceil(TOKENS_PER_SECOND * seconds)


def compression_ratio(text: str) -> float:
    """Bytes of ``text`` over bytes of its zlib compression: high for repeated text."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def plain_words(text: str) -> list[str]:
    """``text``'s words in lower case, without punctuation (apostrophes kept)."""
    words = ("".join(c for c in w.lower() if c.isalnum() or c == "'") for w in text.split())
    return [w for w in words if w]


def repeats_phrase(text: str) -> bool:
    """True when a word or phrase comes twice in a row ("and so and so", "Hello? Hello?"):
    Whisper's loops on short windows. Case and punctuation are ignored. Speech that really
    repeats itself ("bye bye") is flagged too; the caller pays a 30 s decode for it."""
    words = plain_words(text)
    for size in range(1, len(words) // 2 + 1):
        for start in range(len(words) - 2 * size + 1):
            if words[start:start + size] == words[start + size:start + 2 * size]:
                return True
    return False


def looks_looped(text: str, tokens: int, budget: int) -> bool:
    """The decode ran into its bound, compresses like a loop, or repeats a phrase."""
    return (tokens >= budget or compression_ratio(text) > COMPRESSION_RATIO_THRESHOLD
            or repeats_phrase(text))


@dataclass(frozen=True, slots=True)
class FittedDecode:
    """One decode on the fitted window. ``kept`` False: the caller decodes the 30 s window
    instead, because the text ``looped`` or its decoder was unsure of it; an unsure text
    that did not loop is still a reading of the audio (``SttResult.other_readings``)."""

    text: str
    kept: bool
    looped: bool
    #: The language decoded in (asked for, detected, or "en" for an English-only model),
    #: and where it was detected, each language's probability, the most likely first.
    language: str = "en"
    language_probabilities: tuple[tuple[str, float], ...] = ()

    @property
    def unsure_reading(self) -> str | None:
        """The text, where it was set aside only for the decoder's doubt; else None."""
        return self.text if not self.kept and not self.looped and self.text else None


class FittedWhisper:
    """Transcribes with a loaded faster-whisper model, encoding only what the audio needs.

    Thread-safe like the model: the feature extractor and the CTranslate2 model keep no
    per-call state, and the per-language tokenizers cached here are read-only.
    """

    def __init__(self, model: WhisperModel, *, random_weights_tokens: int | None = None) -> None:
        from faster_whisper.transcribe import get_suppressed_tokens

        self._model = model
        #: Bench only (``timing_random_weights``): decode at most this many tokens and keep
        #: every fitted decode, with no loop, doubt or no-speech verdict. None: off.
        self._random_weights_tokens = random_weights_tokens
        self._multilingual = bool(model.model.is_multilingual)
        self._tokenizers: dict[str, Tokenizer] = {}
        # The suppressed set does not depend on the language or the task ((-1,): Whisper's
        # non-speech symbols, as faster-whisper's default suppress_tokens=[-1] asks).
        self._suppress = list(get_suppressed_tokens(self._tokenizer("en"), (-1,)) or ())
        self._silence: np.ndarray | None = None  # the encoding of 30 s of silence
        self._silence_lock = threading.Lock()
        #: Fitted decodes set aside because they looped or were unsure: ``transcribe``
        #: decodes those on the 30 s window (``FasterWhisperStt.transcribe_live`` keeps
        #: an unsure one). A count for reports; concurrent calls may each add one.
        self.fallbacks = 0

    def timing_random_weights(self, tokens: int) -> FittedWhisper:
        """A copy for ``parley-cli bench --weights random`` only: a random-weight Whisper's
        decode never stops and never is sure, so this copy decodes ``tokens`` tokens (a real
        transcript's length) and keeps every fitted decode instead of going to the 30 s
        window. Never for a real model: its loops and doubts would be kept."""
        if tokens < 1:
            raise ValueError(f"timing_random_weights: tokens must be at least 1, got {tokens}")
        return FittedWhisper(self._model, random_weights_tokens=tokens)

    @property
    def random_weights(self) -> bool:
        """Whether this is the bench's random-weight copy (``timing_random_weights``)."""
        return self._random_weights_tokens is not None

    def _tokenizer(self, language: str) -> Tokenizer:
        tokenizer = self._tokenizers.get(language)
        if tokenizer is None:
            from faster_whisper.tokenizer import Tokenizer

            tokenizer = Tokenizer(self._model.hf_tokenizer, self._multilingual,
                                  task="transcribe", language=language)
            self._tokenizers[language] = tokenizer
        return tokenizer

    def _encode(self, features: np.ndarray) -> np.ndarray:
        """The encoder output of ``features`` (n_mels, frames) as a host array (1, frames/2,
        d_model): concatenated on the host, so it works for a model on CUDA too."""
        import ctranslate2

        view = ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None]))
        return np.asarray(self._model.model.encode(view, to_cpu=True))

    def silence_memory(self) -> np.ndarray:
        """The encoder output of 30 s of silence (1, 1500, d_model), computed on first use
        (one 30 s encode) and kept: the positions after the speech come from it."""
        with self._silence_lock:
            if self._silence is None:
                mels = self._model.feature_extractor.mel_filters.shape[0]
                self._silence = self._encode(np.zeros((mels, MAX_FRAMES), np.float32))
            return self._silence

    def features(self, audio: np.ndarray, min_window_s: float) -> np.ndarray | None:
        """Log-mel features of ``audio`` zero-padded (as faster-whisper pads to 30 s) by
        ``TAIL_PAD_FRAMES`` and up to ``min_window_s``, an even frame count of at most
        3000; None when the audio alone exceeds 30 s."""
        mel = self._model.feature_extractor(audio)
        content = mel.shape[-1] - 1  # faster-whisper drops the frame of the end padding
        if content > MAX_FRAMES:
            return None
        frames = min(MAX_FRAMES, max(content + TAIL_PAD_FRAMES,
                                     round(min_window_s * FRAMES_PER_SECOND)))
        frames += frames % 2
        window = np.zeros((mel.shape[0], frames), dtype=np.float32)
        window[:, :content] = mel[:, :content]
        return window

    def memory(self, window: np.ndarray):
        """The decoder's input for ``window``: its encoding, then the silence encoding's
        positions after it, 1500 in all (a CTranslate2 StorageView)."""
        import ctranslate2

        encoded = self._encode(window)
        silence = self.silence_memory()
        full = np.concatenate([encoded, silence[:, encoded.shape[1]:]], axis=1)
        return ctranslate2.StorageView.from_array(np.ascontiguousarray(full, dtype=np.float32))

    def transcribe(self, audio: np.ndarray, language: str | None, beam_size: int,
                   min_window_s: float, previous: str = "") -> str | None:
        """The text of 16 kHz mono float32 ``audio`` (``language`` None: the model's own,
        detected on a multilingual model), or None where the 30 s window must be used:
        audio longer than 30 s, an unsure language detection, or an output that looks
        like a loop or whose decoder was unsure of it (``UNSURE_LOGPROB``).

        ``previous``: the words just before ``audio``, given to the decoder as Whisper's
        earlier text (``<|startofprev|>``, its last ``MAX_PREVIOUS_TOKENS`` tokens), as
        faster-whisper's ``initial_prompt`` does; the result is the new words only."""
        decoded = self.decode(audio, language, beam_size, min_window_s, previous)
        return decoded.text if decoded is not None and decoded.kept else None

    def decode(self, audio: np.ndarray, language: str | None, beam_size: int,
               min_window_s: float, previous: str = "") -> FittedDecode | None:
        """``transcribe``'s decode with its verdict: None where no fitted decode was made
        (audio longer than 30 s, an unsure language detection), else the text and whether
        it can be kept; one that cannot counts in ``fallbacks``."""
        window = self.features(audio, min_window_s)
        if window is None:
            return None
        memory = self.memory(window)
        ct2 = self._model.model
        probabilities: tuple[tuple[str, float], ...] = ()
        if language is None and self._multilingual:
            probabilities = language_probabilities(ct2.detect_language(memory)[0])
            if probabilities[0][1] < LANGUAGE_THRESHOLD:
                return None  # unsure on this little audio: detect on the 30 s window
            language = probabilities[0][0]
        language = language if self._multilingual and language else "en"
        tokenizer = self._tokenizer(language)
        prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        if previous.strip():
            context = tokenizer.encode(" " + previous.strip())[-MAX_PREVIOUS_TOKENS:]
            prompt = [tokenizer.sot_prev, *context, *prompt]
        budget = min(decode_budget(audio.size / SAMPLE_RATE), self._model.max_length - len(prompt))
        if self._random_weights_tokens is not None:
            budget = min(budget, self._random_weights_tokens)
        result = ct2.generate(
            memory, [prompt], beam_size=beam_size, patience=1.0, length_penalty=1.0,
            max_length=len(prompt) + budget, return_scores=True, return_no_speech_prob=True,
            suppress_blank=True, suppress_tokens=self._suppress,
        )[0]
        tokens = result.sequences_ids[0]
        # faster-whisper's average log-probability, from the length-normalised score.
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        if self._random_weights_tokens is not None:  # random words: no verdict means anything
            return FittedDecode(tokenizer.decode(tokens).strip(), kept=True, looped=False,
                                language=language, language_probabilities=probabilities)
        if result.no_speech_prob > NO_SPEECH_THRESHOLD and avg_logprob < LOG_PROB_THRESHOLD:
            return FittedDecode("", kept=True, looped=False, language=language,
                                language_probabilities=probabilities)
        text = tokenizer.decode(tokens).strip()
        looped = looks_looped(text, len(tokens), budget)
        decoded = FittedDecode(text, kept=not looped and avg_logprob >= UNSURE_LOGPROB,
                               looped=looped, language=language,
                               language_probabilities=probabilities)
        if not decoded.kept:
            self.fallbacks += 1
        return decoded
