"""RL algorithms as plain in-process objects (no transport imports)."""
