"""The measuring tools behind ``parley-cli bench``: layouts, the realtime load test, the soak."""
