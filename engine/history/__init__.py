"""The stored conversations: every finished turn, searchable, exportable.

``database`` (the SQLite file: schema, checks, migrations), ``store`` (``HistoryStore``:
reading, writing, search), ``recorder`` (an engine's turns recorded as they finish) and
``export`` (Markdown and JSON).
"""
