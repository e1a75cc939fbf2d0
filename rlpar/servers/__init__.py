"""Versioned key-value server, push-pull model and gradient servers."""
