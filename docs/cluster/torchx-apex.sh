#!/bin/bash
# rlpar through TorchX's dist.ddp component (torchrun on each node, c10d rendezvous on
# the first). An example only: rlpar does not depend on TorchX and its tests do not run
# this file (torchx is not installed in rlpar's environment; `pip install torchx`).
# TorchX versions differ in dist.ddp's options: check `torchx run dist.ddp --help`.
# See docs/cluster.md.
set -euo pipefail

# The run's secret for every rank. --env writes it into the job TorchX submits (for
# Slurm, the generated batch script): keep that private, or export the variable in an
# environment your scheduler passes on instead.
RLPAR_RUN_SECRET=$(python -c 'import secrets; print(secrets.token_hex(16))')

# -j 4x16: 4 nodes of 16 ranks. RLPAR_LISTEN_ADDRESS=auto: each rank listens on the
# address its node reaches the rendezvous host from (dist.ddp quotes the job's
# arguments, so a per-node address cannot be computed on its command line).
torchx run -s slurm -cfg time=02:00:00 dist.ddp -j 4x16 --cpu 16 \
    --env "RLPAR_RUN_SECRET=$RLPAR_RUN_SECRET,RLPAR_LISTEN_ADDRESS=auto" \
    -m experiments.apex -- --env-id ALE/Pong-v5 "$@"
