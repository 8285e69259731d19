"""Parley engine: the voice pipeline, headless (no Qt)."""
