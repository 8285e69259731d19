"""``python -m engine.cli``: the same as ``parley-cli``."""

import sys

from engine.cli.main import main

sys.exit(main())
