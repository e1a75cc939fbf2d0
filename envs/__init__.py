"""Vector environments (in-process and subprocess), multi-agent adapters, test envs."""
