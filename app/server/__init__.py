"""The Server tab: realtime mode served from the app."""
