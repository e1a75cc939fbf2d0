"""Replay storage: ring storage, trees, (prioritized) replay, distributed replay."""
