"""The main window: it composes the features, and owns the header, menus, status line and shortcuts."""
