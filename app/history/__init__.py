"""The history browser: past conversations by day, search, export, delete."""
