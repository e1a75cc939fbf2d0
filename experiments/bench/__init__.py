"""Benchmarks, by subject: each prints one JSON line per result
(:func:`experiments.bench.tools.emit.emit`), with peers measured in the same run.

Run one as ``python -m experiments.bench.<subject>.<bench>`` from a checkout (the
benchmarks are not in the wheel); docs/benchmarks.md lists the commands and results.

- ``components``: rlpar's building blocks against raw torch and peer libraries (RPC,
  model/gradient servers, replay, trajectory queue, vector envs, checkpoints);
- ``learning``: one algorithm, small task: time and env steps to solve it (CartPole,
  Pendulum), against peer implementations where there are some;
- ``minatar``: MinAtar under a wall-clock budget, ours against Stable-Baselines3, and
  the analyses of its runs (learner cost, dead units);
- ``continuous``: continuous control under a wall-clock budget (Ape-X TD3 against SB3
  TD3/SAC) and the analyses of its runs (curve comparison, posture);
- ``multiagent``: MADDPG on MPE against TorchRL, and agent-parallel inference modes;
- ``scale``: many processes on one machine: Ape-X with tens of actors (ingest,
  fan-in, actor scaling), several learners, synchronous data parallelism;
- ``recovery``: seconds to recover from a killed rank;
- ``gpu``: every CUDA path, checked in one go;
- ``tools``: what the benchmarks share (JSON lines, running a job, wall-clock runs
  with snapshots, envs made for benchmarks).
"""
