"""The Settings tab: a backend, model and device per stage, and every other setting."""
