"""``python -m app``: start the Parley desktop app."""

import sys

from app.main import main

sys.exit(main())
