"""Partially observed envs: ``python -m experiments.bench.pomdp`` (:mod:`.budget`), R2D2
against feed-forward Ape-X DQN and sb3-contrib's RecurrentPPO under one wall-clock budget."""


def main(argv: list[str] | None = None) -> int:
    from experiments.bench.pomdp.budget import main as budget_main

    return budget_main(argv)
