"""One pipeline unit: the five stages composed with bounded queues (``engine/units/unit.py``)."""
