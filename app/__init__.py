"""Parley's desktop front end (PySide6). It imports the engine; the engine never imports it."""
