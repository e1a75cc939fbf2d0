import dataclasses
from typing import Literal

import pytest

from experiments.cli import build_parser, parse_config


@dataclasses.dataclass
class Config:
    env_id: str = dataclasses.field(default="CartPole-v1", metadata={"help": "gymnasium id"})
    num_actors: int = 2
    lr: float = 1e-3
    device: Literal["cpu", "cuda"] = "cpu"
    budget: float | None = None
    double_q: bool = True

    def validate(self) -> None:
        if self.num_actors < 1:
            raise ValueError(f"--num-actors must be >= 1, got {self.num_actors}")


def test_defaults_and_overrides():
    assert parse_config(Config, []) == Config()
    cfg = parse_config(Config, ["--num-actors", "3", "--lr", "0.5", "--no-double-q", "--budget", "none"])
    assert (cfg.num_actors, cfg.lr, cfg.double_q, cfg.budget) == (3, 0.5, False, None)
    assert parse_config(Config, ["--budget", "2.5"]).budget == 2.5


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--num-actors", "0"], "--num-actors must be >= 1"),
        (["--num-actors", "two"], "invalid int value"),
        (["--device", "tpu"], "invalid choice"),
        (["--num-actor", "2"], "unrecognized arguments"),
    ],
)
def test_bad_values_exit_with_a_message_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_config(Config, argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_help_lists_fields():
    text = build_parser(Config).format_help()
    assert "--env-id" in text and "gymnasium id" in text and "--no-double-q" in text


def test_rejects_non_dataclass():
    with pytest.raises(TypeError, match="not a dataclass"):
        build_parser(int)
