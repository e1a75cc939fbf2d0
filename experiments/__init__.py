"""Runnable entry points: python -m experiments.apex / a3c / maddpg."""
