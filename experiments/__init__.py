"""Runnable entry points: python -m experiments.apex / a3c / maddpg."""

from algorithms import _moved

_moved.install()  # experiments.builders.* name their new place, algorithms/<agent>/builder.py
