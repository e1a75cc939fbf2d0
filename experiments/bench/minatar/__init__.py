"""MinAtar under a wall-clock budget (:mod:`.budget`: ours against Stable-Baselines3,
with its evaluator, job access and peers) and the analyses of its runs
(:mod:`.learner`: what bounds the Ape-X learner; :mod:`.dormant`: dead units)."""
