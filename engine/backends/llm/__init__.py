"""Language-model backends (one module per backend, imported lazily by name)."""
