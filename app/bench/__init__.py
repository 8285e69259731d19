"""The Benchmark tab: device layouts compared."""
