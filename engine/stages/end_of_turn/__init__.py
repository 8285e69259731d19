"""Learned end-of-turn detection: an audio model and a text signal, combined."""
