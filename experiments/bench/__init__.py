"""Benchmarks: each prints one JSON line per result, peers measured in the same run."""
