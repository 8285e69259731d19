"""Speech-to-text backends (one module per backend, imported lazily by name)."""
