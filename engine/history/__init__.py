"""The stored conversations: every finished turn, searchable, exportable."""
