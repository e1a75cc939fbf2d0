"""Many processes on one machine: Ape-X with tens of actors (:mod:`.apex` and its
cases: ingest, fan-in, actor scaling), several learners, synchronous data
parallelism (all-reduce cost, stragglers, DDP against flat buckets)."""
