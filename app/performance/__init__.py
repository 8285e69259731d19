"""The live meters and the performance graphs."""
