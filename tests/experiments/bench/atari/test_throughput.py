"""The Atari throughput table's tool: a job's flags reach its acting network, and a
flag the job does not take ends the tool before any measurement."""

import json

import pytest

pytest.importorskip("ale_py")

from experiments.bench.atari import throughput  # noqa: E402


@pytest.mark.timeout(120)
def test_acting_runs_the_network_the_flags_name(tmp_path, capsys, monkeypatch):
    built = []
    real = throughput.acting_network

    def spy(job, env_id, flags=""):
        num_envs, act = real(job, env_id, flags)
        built.append((job, flags, num_envs))
        return num_envs, act

    monkeypatch.setattr(throughput, "acting_network", spy)
    assert throughput.main(["--jobs", "rlpar-ppo", "--depths", "acting", "--seconds", "0.3", "--out", str(tmp_path),
                            "--flags", "rlpar-ppo=--cnn small", "--flags", "rlpar-ppo=--num-envs 2"]) == 0
    assert built == [("rlpar-ppo", "--cnn small --num-envs 2", 2)]
    (line,) = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert line["depth"] == "acting" and line["flags"] == "--cnn small --num-envs 2" and line["num_envs"] == 2
    assert line["env_steps"] > 0 and "loadavg_start" in line


def test_a_flag_the_job_does_not_take_is_refused_before_measuring(capsys):
    with pytest.raises(SystemExit) as exit_:
        throughput.main(["--jobs", "rlpar-ppo", "--flags", "rlpar-ppo=--cnn tiny"])
    assert exit_.value.code == 2 and "tiny" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        throughput.main(["--flags", "sb3-ppo=--cnn small"])
    assert exit_.value.code == 2 and "the peers run the bench's own settings" in capsys.readouterr().err
