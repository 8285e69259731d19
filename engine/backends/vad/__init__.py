"""Voice activity detection backends (one module per backend, imported lazily by name)."""
