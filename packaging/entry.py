"""The frozen app's entry script: PyInstaller starts here and runs ``app.main:main``.

``app.main`` handles every argument, ``--self-test`` included (it dispatches to
``app.selftest`` before any Qt object exists, so the self-test needs no display).
``freeze_support`` lets a frozen child process started by ``multiprocessing`` (spawn on
macOS and Windows) run its task instead of a second copy of the app.
"""

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()
    from app.main import main

    sys.exit(main())
