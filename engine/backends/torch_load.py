"""One transformers model load at a time in this process.

The engine loads its stages' models at once, one thread each. transformers builds a
model under a process-wide "empty weights" (meta device) context while it reads the
checkpoint, so two ``from_pretrained`` calls in two threads can leave one model with
weights still on the meta device ("Cannot copy out of meta tensor"). Each transformers
backend holds this lock from ``from_pretrained`` until its model is on its device.
"""

from __future__ import annotations

import threading

#: Held around a transformers model's ``from_pretrained`` and its move to the device.
TRANSFORMERS_LOAD_LOCK = threading.Lock()
