"""Atari from pixels: ``python -m experiments.bench.atari`` (:mod:`.budget`) and the
throughput table, ``python -m experiments.bench.atari.throughput``."""


def main(argv: list[str] | None = None) -> int:
    from experiments.bench.atari.budget import main as budget_main

    return budget_main(argv)
