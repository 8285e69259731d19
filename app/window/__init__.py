"""The main window, the composition root: the header, tabs, menus, status line and snapshot timer it
owns, and the features it composes (each package's ``install(window)``)."""
