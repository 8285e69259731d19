"""The five stages of a pipeline unit: VAD, STT, LLM, TTS and the audio sink."""
