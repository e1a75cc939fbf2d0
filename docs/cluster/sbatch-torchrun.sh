#!/bin/bash
# rlpar on Slurm, pattern 1: srun starts one torchrun per node; torchrun starts the
# node's ranks and meets the other nodes in a c10d rendezvous on the first node.
# Submit from the repository root (or with rlpar installed):
#   sbatch docs/cluster/sbatch-torchrun.sh --env-id ALE/Pong-v5
# Extra arguments go to the job (experiments.apex here). See docs/cluster.md.
#SBATCH --job-name=rlpar-apex
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1        # one torchrun per node
#SBATCH --cpus-per-task=16         # the node's cores, shared by its ranks
#SBATCH --time=02:00:00
#SBATCH --output=%x-%j.out

set -euo pipefail
NPROC_PER_NODE=${NPROC_PER_NODE:-16}   # ranks per node

# The run's secret: made once here, exported, and so handed by srun to every task in
# its environment (srun's default --export=ALL). Never on a command line: ps shows those.
export RLPAR_RUN_SECRET=$(python -c 'import secrets; print(secrets.token_hex(16))')

# The rendezvous on the first node; a port from the job id (15000-29999), so two jobs
# sharing a node do not meet.
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
PORT=$((15000 + SLURM_JOB_ID % 15000))

# --kill-on-bad-exit: once a node's torchrun fails (a rank raised, or ranks were lost:
#   the survivors exit with status 3), Slurm stops the other nodes (SIGTERM: they write
#   their final checkpoint) and the job ends instead of holding the allocation.
# --max-restarts 0: a lost node does not come back within this job; with N > 0 the
#   agents would wait for it in a new rendezvous for join_timeout (600 s by default;
#   add --rdzv-conf join_timeout=120 to shorten it).
# --listen-address auto: each rank listens on the address its node reaches the
#   rendezvous host from (the cluster's internal network; keep it private).
srun --kill-on-bad-exit=1 --ntasks-per-node=1 \
    python -m torch.distributed.run --nnodes "$SLURM_JOB_NUM_NODES" --nproc-per-node "$NPROC_PER_NODE" \
        --rdzv-backend c10d --rdzv-endpoint "$HEAD:$PORT" --rdzv-id "$SLURM_JOB_ID" --max-restarts 0 \
    -m experiments.apex --listen-address auto "$@"
