"""experiments.runtime.cli: nested configs as flat flags, --config files, errors."""

import dataclasses
import json
from typing import Literal

import pytest

from experiments.runtime.cli import (
    build_parser,
    changed_fields,
    field,
    load_config,
    parse_config,
    save_config,
    section,
)


@dataclasses.dataclass
class Inner:
    lr: float = field(1e-3, help="learning rate")
    device: Literal["cpu", "cuda"] = field("cpu", help="device")
    budget: float | None = field(None, help="budget", )
    horizon: float = field(float("inf"), allow_inf=True, help="may be infinite")

    def validate(self):
        if not self.lr > 0:
            raise ValueError(f"--lr must be > 0, got {self.lr}")


@dataclasses.dataclass
class Outer:
    inner: Inner = section(lambda: Inner(lr=0.5))
    num_actors: int = field(2, help="actors")
    double_q: bool = field(True, help="double Q")


def test_defaults_come_from_the_sections_factories_and_flags_override_them():
    assert parse_config(Outer, []) == Outer()
    assert parse_config(Outer, []).inner.lr == 0.5
    cfg = parse_config(Outer, ["--num-actors", "3", "--lr", "0.25", "--no-double-q", "--budget", "none"])
    assert (cfg.num_actors, cfg.inner.lr, cfg.double_q, cfg.inner.budget) == (3, 0.25, False, None)


@pytest.mark.parametrize("argv, message", [
    (["--num-actors", "two"], "invalid int value"),
    (["--device", "tpu"], "invalid choice"),
    (["--lr", "nan"], "--lr must be a finite number"),
    (["--lr", "inf"], "--lr must be a finite number"),
    (["--lr", "-1"], "--lr must be > 0"),
    (["--num-actor", "2"], "unrecognized arguments"),
    (["--config", "/no/such/config.json"], "cannot read"),
])
def test_bad_values_exit_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_config(Outer, argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_infinity_where_the_field_allows_it():
    assert parse_config(Outer, ["--horizon", "inf"]).inner.horizon == float("inf")


def test_help_lists_every_flag_with_its_choices_and_default():
    text = build_parser(Outer).format_help()
    assert "--lr" in text and "learning rate (default: 0.5)" in text
    assert "{cpu,cuda}" in text and "--no-double-q" in text and "--config FILE" in text


def test_a_saved_config_reruns_and_flags_override_it(tmp_path):
    path = tmp_path / "config.json"
    save_config(parse_config(Outer, ["--num-actors", "7", "--lr", "0.125"]), str(path))
    assert load_config(Outer, str(path)).num_actors == 7
    cfg = parse_config(Outer, ["--config", str(path), "--num-actors", "4"])
    assert (cfg.num_actors, cfg.inner.lr) == (4, 0.125)


@dataclasses.dataclass
class Launch:
    inner: Inner = section(Inner)
    resume: str = field("", per_launch=True, help="continue this run")


def test_a_per_launch_field_is_never_saved_and_ignored_when_read(tmp_path):
    path = tmp_path / "config.json"
    config = Launch(resume="runs/x")
    config.inner.lr = 0.5
    save_config(config, str(path))
    assert json.loads(path.read_text()) == {"inner": dataclasses.asdict(Inner(lr=0.5))}
    # A file written before per-launch fields were left out still reads, without it.
    path.write_text(json.dumps({"inner": {"lr": 0.5}, "resume": "runs/x"}))
    assert load_config(Launch, str(path)) == Launch(inner=Inner(lr=0.5))


def test_changed_fields_are_those_that_differ_from_the_reference():
    config = Launch(resume="runs/x")
    config.inner.budget = 3.0
    assert changed_fields(config, Launch()) == {"resume": "runs/x", "budget": 3.0}
    assert changed_fields(Launch(), Launch()) == {}


def test_a_config_file_with_an_unknown_field_is_refused(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"inner": {"lr": 1.0, "lrr": 2.0}}))
    with pytest.raises(SystemExit):
        parse_config(Outer, ["--config", str(path)])
    assert "unknown field(s) ['lrr']" in capsys.readouterr().err


def test_a_field_without_help_or_a_flag_in_two_sections_is_a_programming_error():
    @dataclasses.dataclass
    class NoHelp:
        x: int = 1

    with pytest.raises(TypeError, match="no help text"):
        build_parser(NoHelp)

    @dataclasses.dataclass
    class Twice:
        a: Inner = section(Inner)
        b: Inner = section(Inner)

    with pytest.raises(TypeError, match="appears in two sections"):
        build_parser(Twice)


def test_rejects_non_dataclass():
    with pytest.raises(TypeError, match="not a dataclass"):
        build_parser(int)


def test_an_algorithms_config_is_a_section_with_sizes_internal_fields_and_flag_named_errors(tmp_path, capsys):
    """An algorithm's config as a job's ``learn`` section: ``--hidden 32,16`` is a tuple
    saved as the text a run directory always held (an old one still loads), a field of
    the library's only is no flag and saved only when changed, and the algorithm's own
    check is reported by the flag's name."""
    from algorithms.ppo.config import PPOConfig
    from experiments.runtime.cli import load_config, parse_config, save_config

    @dataclasses.dataclass
    class Job:
        learn: PPOConfig = dataclasses.field(default_factory=lambda: PPOConfig(lr=None))

    config = parse_config(Job, ["--hidden", "32,16"])
    assert config.learn.hidden == (32, 16) and config.learn.lr is None
    path = str(tmp_path / "config.json")
    save_config(config, path)
    saved = json.loads(open(path).read())["learn"]
    assert saved["hidden"] == "32,16" and "optimizer_eps" not in saved and saved["lr"] is None
    config.learn.optimizer_eps = 1e-3
    save_config(config, path)
    loaded = load_config(Job, path)
    assert loaded.learn.optimizer_eps == 1e-3 and loaded.learn.hidden == (32, 16) and loaded.learn.lr is None
    with pytest.raises(SystemExit):
        parse_config(Job, ["--optimizer-eps", "1e-3"])
    with pytest.raises(SystemExit):
        parse_config(Job, ["--gamma", "1.5"])
    assert "--gamma must be in" in capsys.readouterr().err
