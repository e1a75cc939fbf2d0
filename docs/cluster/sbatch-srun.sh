#!/bin/bash
# rlpar on Slurm, pattern 2: srun starts every rank itself, one task per process, no
# torchrun. Each task joins the world from its SLURM_PROCID (rank), SLURM_NTASKS (world
# size) and SLURM_LOCALID; rank 0 runs on the step's first node and hosts the world's
# store there, on MASTER_PORT or 15000 + SLURM_JOB_ID % 15000. Submit with:
#   sbatch docs/cluster/sbatch-srun.sh --env-id ALE/Pong-v5
# Extra arguments go to the job (experiments.apex here). See docs/cluster.md.
#SBATCH --job-name=rlpar-apex
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=16       # ranks per node: rank 0 (the learner) is task 0 of the first node
#SBATCH --cpus-per-task=1
#SBATCH --time=02:00:00
#SBATCH --output=%x-%j.out

set -euo pipefail

# The run's secret, exported: srun hands it to every task (default --export=ALL).
export RLPAR_RUN_SECRET=$(python -c 'import secrets; print(secrets.token_hex(16))')
export OMP_NUM_THREADS=1           # what torchrun would set: one intra-op thread per rank
# Optional overrides of the store's place (e.g. another interface's address):
# export MASTER_ADDR=... MASTER_PORT=...

# --kill-on-bad-exit: once a task fails (it raised, or ranks were lost: the survivors
#   exit with status 3), Slurm stops the others (SIGTERM) and the job ends.
srun --kill-on-bad-exit=1 python -m experiments.apex --listen-address auto "$@"
