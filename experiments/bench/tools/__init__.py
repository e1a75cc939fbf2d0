"""What the benchmarks share: one JSON line per result (:mod:`.emit`), running a job
in-process (:mod:`.job_runs`), wall-clock runs with snapshots (:mod:`.wallclock`), and
envs made for benchmarks (:mod:`.sleeping_env`, :mod:`.straggler_env`)."""
