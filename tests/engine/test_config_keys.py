"""The settings' dotted keys are public (TOML keys, ``parley-cli`` flags, QSettings keys):
their list and order must not change when config.py is reorganised."""

import inspect

from engine.config import EngineConfig, LlmConfig, RemoteFields, SttConfig, TtsConfig, config_fields

# Recorded from config_fields() before the remote fields were declared once (RemoteFields).
KEYS = [
    "device", "units", "voice_budget_s",
    "vad.backend", "vad.model", "vad.device", "vad.threshold", "vad.min_speech_ms",
    "vad.min_silence_ms", "vad.pad_ms",
    "stt.backend", "stt.model", "stt.device", "stt.dtype", "stt.language", "stt.languages",
    "stt.beam_size",
    "stt.window", "stt.min_window_s", "stt.continue_turn",
    "stt.base_url", "stt.api_key_env", "stt.timeout_s", "stt.retries", "stt.stream",
    "llm.backend", "llm.model", "llm.device", "llm.dtype", "llm.system_prompt",
    "llm.max_new_tokens", "llm.max_sentences", "llm.history_turns", "llm.temperature",
    "llm.repetition_penalty", "llm.no_repeat_ngram_size", "llm.summarize_history",
    "llm.base_url", "llm.api_key_env", "llm.timeout_s", "llm.retries", "llm.extra_body",
    "tts.backend", "tts.model", "tts.device", "tts.voice", "tts.voices", "tts.speed",
    "tts.first_clause_words",
    "tts.base_url", "tts.api_key_env", "tts.timeout_s", "tts.retries", "tts.response_format",
    "audio.input_device", "audio.output_device", "audio.capture_buffer_s", "audio.echo_cancellation",
    "turns.reopen_grace_ms", "turns.speculative", "turns.live_transcription",
    "turns.live_transcription_interval", "turns.barge_in", "turns.end_of_turn",
    "turns.end_of_turn_threshold", "turns.speculative_start_ms", "turns.text_signal",
    "turns.remote_speculation",
    "tools.enabled", "tools.user_module", "tools.timeout_s", "tools.trusted", "tools.mcp_servers",
    "history.enabled",
]


def test_dotted_keys_and_their_order_are_unchanged():
    assert [dotted for dotted, _field, _type in config_fields()] == KEYS


def test_flat_view_lists_the_same_keys_in_the_same_order():
    assert list(EngineConfig().flat()) == KEYS


def test_remote_fields_are_declared_once_and_shared_by_the_three_remote_stages():
    for section in (SttConfig, LlmConfig, TtsConfig):
        assert issubclass(section, RemoteFields)
        # Declared on RemoteFields only, not again on the stage's own class.
        assert "base_url" not in inspect.get_annotations(section)
    config = EngineConfig().with_overrides({"llm.base_url": "http://gpu-box:8000/v1",
                                            "tts.timeout_s": "5", "stt.retries": 0})
    assert config.llm.base_url == "http://gpu-box:8000/v1"
    assert config.stt.base_url == ""  # each stage keeps its own value
    assert config.tts.timeout_s == 5.0 and config.stt.retries == 0
