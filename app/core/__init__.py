"""What every feature of the window shares: the engine controller, the background lanes, settings, theme."""
