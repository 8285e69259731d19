"""What a turn is measured by: the marks of its timeline and its figures, each declared once.

A foundation module (it imports nothing from ``engine`` but errors and config), so that
the backends, which report figures of their own (a remote server's network time), and the
streaming core both read the same names without one importing the other.
``engine.pipeline.metrics`` records them.
"""

from __future__ import annotations

import enum


class Mark(enum.StrEnum):
    """The marks of a turn's timeline, in the order they normally happen.

    Declared once: stages record these members, and the JSON report (``timeline``), the
    GUI and the tests read them. Recording anything else raises at once.
    """

    SPEECH_START = "speech_start"  # the user started speaking (first voiced sample)
    SPEECH_END = "speech_end"  # the user stopped speaking (last voiced sample): zero of v2v
    VAD_END = "vad_end"  # the VAD decided the segment ended (after its silence wait)
    COMMITTED = "committed"  # the reopen grace passed: the turn is final
    STT_START = "stt_start"
    STT_DONE = "stt_done"
    LLM_START = "llm_start"
    LLM_FIRST_TOKEN = "llm_first_token"
    TTS_FIRST_TEXT = "tts_first_text"  # first clause handed to TTS
    TTS_FIRST_AUDIO = "tts_first_audio"  # TTS produced its first audio
    AUDIO_OUT_FIRST = "audio_out_first"  # first reply sample heard (sink's clock)
    REPLY_DONE = "reply_done"  # last reply chunk handed to the sink
    LLM_STOPPED = "llm_stopped"  # generation was cut off (barge-in, reopened turn)
    BARGE_IN = "barge_in"  # the user's new speech cut this reply off
    # The LLM stage summarised the turns the prompt no longer keeps, after this turn's
    # reply (engine.stages.summary): when that call started and ended (done or cancelled).
    SUMMARY_START = "summary_start"
    SUMMARY_END = "summary_end"


class UnitOfMeasure(enum.Enum):
    """How a figure is shown and rounded."""

    SECONDS = "s"
    COUNT = "count"
    RATE = "tokens/s"
    RATIO = "ratio"


class Figure(enum.StrEnum):
    """Per-turn figures, declared once with their label, unit and where they appear.

    A stage records a figure with ``Metrics.figure``; ``derived`` ones are computed from
    marks and other figures by ``TurnRecord.value`` and cannot be recorded. ``report``
    figures are keys of each turn in ``parley-cli converse --json`` (in this order);
    ``bench`` ones are summarised by ``parley-cli bench``; the GUI's last-turn panel
    shows the bench ones too.
    """

    label: str
    unit: UnitOfMeasure
    derived: bool
    report: bool
    bench: bool

    def __new__(cls, key: str, label: str, unit: UnitOfMeasure, *flags: str) -> Figure:
        member = str.__new__(cls, key)
        member._value_ = key
        member.label = label
        member.unit = unit
        member.derived = "derived" in flags
        member.report = "report" in flags
        member.bench = "bench" in flags
        return member

    VOICE_TO_VOICE_S = ("voice_to_voice_s", "voice-to-voice", UnitOfMeasure.SECONDS,
                        "derived", "report", "bench")
    SILENCE_WAIT_S = ("silence_wait_s", "silence wait (VAD end of speech)", UnitOfMeasure.SECONDS,
                      "derived", "report", "bench")
    STT_COMPUTE_S = ("stt_compute_s", "STT compute (final segment)", UnitOfMeasure.SECONDS,
                     "report", "bench")
    LLM_FIRST_CHUNK_COMPUTE_S = ("llm_first_chunk_compute_s", "LLM to first clause", UnitOfMeasure.SECONDS,
                                 "report", "bench")
    TTS_FIRST_COMPUTE_S = ("tts_first_compute_s", "TTS first chunk", UnitOfMeasure.SECONDS,
                           "report", "bench")
    ENGINE_OVERHEAD_S = ("engine_overhead_s", "engine overhead (hand-offs)", UnitOfMeasure.SECONDS,
                         "derived", "report", "bench")
    LLM_TOKENS = ("llm_tokens", "LLM tokens", UnitOfMeasure.COUNT, "report")
    LLM_PROMPT_TOKENS = ("llm_prompt_tokens", "LLM prompt tokens prefilled", UnitOfMeasure.COUNT, "report")
    LLM_TOKENS_PER_S = ("llm_tokens_per_s", "LLM decode", UnitOfMeasure.RATE, "report", "bench")
    STT_RTF = ("stt_rtf", "STT real-time factor", UnitOfMeasure.RATIO, "report", "bench")
    TTS_RTF = ("tts_rtf", "TTS real-time factor", UnitOfMeasure.RATIO, "derived", "report", "bench")
    DROPPED_REVISIONS = ("dropped_revisions", "dropped revisions", UnitOfMeasure.COUNT, "report")
    # Every reply requested for the turn, the dropped revisions' included (a speculative
    # request to a metered API costs its tokens even when dropped): how many, and their
    # prompt and completion tokens as the model reported them (a request cut off before a
    # remote server's usage came counts its streamed tokens and no prompt tokens).
    LLM_REQUESTS = ("llm_requests", "LLM requests (speculative included)", UnitOfMeasure.COUNT,
                    "report")
    LLM_TURN_PROMPT_TOKENS = ("llm_turn_prompt_tokens", "LLM prompt tokens, all requests",
                              UnitOfMeasure.COUNT, "report")
    LLM_TURN_COMPLETION_TOKENS = ("llm_turn_completion_tokens",
                                  "LLM completion tokens, all requests", UnitOfMeasure.COUNT,
                                  "report")
    LLM_HISTORY_TURNS = ("llm_history_turns", "past turns in the prompt", UnitOfMeasure.COUNT)
    TTS_COMPUTE_S = ("tts_compute_s", "TTS compute (whole reply)", UnitOfMeasure.SECONDS)
    TTS_AUDIO_S = ("tts_audio_s", "TTS audio made", UnitOfMeasure.SECONDS)
    # Learned end of turn, at the decision: each signal, their combination, and whether
    # the turn was committed before its grace ran out (1) or waited for it (0).
    EOT_AUDIO_P = ("end_of_turn_audio_p", "end of turn: audio model", UnitOfMeasure.RATIO, "report")
    EOT_TEXT_P = ("end_of_turn_text_p", "end of turn: text signal", UnitOfMeasure.RATIO, "report")
    EOT_SCORE = ("end_of_turn_score", "end of turn: combined", UnitOfMeasure.RATIO, "report")
    EOT_EARLY = ("end_of_turn_early", "committed before the grace ended", UnitOfMeasure.COUNT, "report")
    # The text signal's own LLM pass, which runs before the reply's (its compute, and
    # what it waited for the CPU).
    EOT_TEXT_S = ("end_of_turn_text_s", "end of turn: text signal compute", UnitOfMeasure.SECONDS,
                  "report")
    EOT_TEXT_LOCK_WAIT_S = ("end_of_turn_text_lock_wait_s", "end of turn: text signal lock wait",
                            UnitOfMeasure.SECONDS, "report")
    # Time to first token, and what a remote stage (an OpenAI-compatible server) spends on
    # the network apart from the server's work: "network" is connecting (0 on a kept-alive
    # connection) plus sending the request (the audio, for STT); "headers" runs from the
    # request's start to the response headers (a streamed reply sends them before it
    # generates, a non-streamed one after its work). None where the stage is local.
    LLM_FIRST_TOKEN_S = ("llm_first_token_s", "LLM time to first token", UnitOfMeasure.SECONDS, "report")
    LLM_NETWORK_S = ("llm_network_s", "LLM network (connect + send)", UnitOfMeasure.SECONDS, "report")
    LLM_HEADERS_S = ("llm_headers_s", "LLM time to response headers", UnitOfMeasure.SECONDS, "report")
    STT_NETWORK_S = ("stt_network_s", "STT network (connect + upload)", UnitOfMeasure.SECONDS, "report")
    STT_HEADERS_S = ("stt_headers_s", "STT time to response headers", UnitOfMeasure.SECONDS, "report")
    # stt.language auto: Whisper's probability of the language the turn was heard in
    # (the language itself is ``TurnRecord.language``).
    STT_LANGUAGE_P = ("stt_language_p", "STT language probability", UnitOfMeasure.RATIO,
                      "report")
    TTS_NETWORK_S = ("tts_network_s", "TTS network (connect + send)", UnitOfMeasure.SECONDS, "report")
    TTS_HEADERS_S = ("tts_headers_s", "TTS time to response headers", UnitOfMeasure.SECONDS, "report")
    # Waits inside the critical path's work: on a lock another thread held (the MLX lock,
    # a shared model's lock; STT's final segment, the LLM up to its first clause, TTS's
    # first chunk), and in a stage's queue while the stage was busy with other work.
    STT_LOCK_WAIT_S = ("stt_lock_wait_s", "STT lock wait", UnitOfMeasure.SECONDS, "report")
    LLM_LOCK_WAIT_S = ("llm_lock_wait_s", "LLM lock wait (to first clause)", UnitOfMeasure.SECONDS,
                       "report")
    TTS_LOCK_WAIT_S = ("tts_lock_wait_s", "TTS lock wait (first chunk)", UnitOfMeasure.SECONDS,
                       "report")
    QUEUE_WAIT_S = ("queue_wait_s", "queue waits (stage busy)", UnitOfMeasure.SECONDS, "report")
    # The critical path's wait for the turn to commit (engine.pipeline.critical_path).
    COMMIT_WAIT_S = ("commit_wait_s", "wait for the turn to commit", UnitOfMeasure.SECONDS,
                     "derived", "report", "bench")
