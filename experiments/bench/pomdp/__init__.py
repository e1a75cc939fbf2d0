"""Partially observed envs under a wall-clock budget: R2D2 against feed-forward Ape-X DQN
and sb3-contrib's RecurrentPPO (:mod:`.budget`)."""
