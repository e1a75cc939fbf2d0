# Two entry points (README quick start): `make run` and `make test`; `make docs` builds the manual.
# Each creates .venv on first use, with the versions pinned in constraints.txt.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# atari: envs.atari and its equivalence tests against gymnasium's wrappers run in CI too;
# minatar: the MinAtar envs and the small-image conv nets' tests on them; docs: the manual's
# site (mkdocs), built by `make test` too.
EXTRAS ?= dev,mpe,atari,minatar,video,docs

.PHONY: run test docs bench-deps clean

# uv installs the same pinned set in about 8 s where pip takes about 66 s (most of CI's set-up).
# Bytecode: without .pyc files every process that imports torch compiles its sources again
# where PYTHONDONTWRITEBYTECODE is set (import torch: 4.0 s instead of 2.4 s). uv's
# --compile-bytecode compiled all of site-packages (25 s of the set-up's 34 on 2 cores, most
# of it torch modules no job imports); instead the install compiles this project's sources
# and imports what the jobs and the test run import, writing the bytecode of those alone
# (about 3 s). A module imported later for the first time compiles then, once, where
# bytecode may be written.
# uv does not read pip's find-links, where this project's machines keep the CPU build of
# torch; without that wheel uv would fetch the multi-GB CUDA build, so it is used only where
# the wheel is on disk, and pip does the install everywhere else.
WHEELS ?= /opt/wheels
TORCH_WHEEL := $(wildcard $(WHEELS)/torch-$(shell sed -n 's/^torch==//p' constraints.txt)+cpu-*.whl)

# What every job and the test run import (the dev extra's tools where installed), and the
# replay's numba kernels compiled into the user's cache (rlpar.buffers.jit; 4.4 s of one
# core): otherwise the suite's first processes, three workers and their ranks, each compile
# them at once before any has written the cache.
define WARM_IMPORTS
import importlib.util
for name in ["experiments.apex", "experiments.ppo", "experiments.impala", "experiments.a3c", "experiments.a2c",
             "experiments.maddpg", "experiments.pqn", "experiments.evaluate", "torch.distributed.run",
             "torch.utils.tensorboard", "torch.distributed.rpc", "rlpar.buffers.trees", "rlpar.buffers.jit",
             "rlpar.buffers.stream_kernel", "rlpar.buffers.frame_pool_kernel", "numba", "scipy.linalg",
             "gymnasium.envs.classic_control", "gymnasium.wrappers", "pytest", "xdist", "hypothesis"]:
    if importlib.util.find_spec(name.split(".")[0]) is not None:
        __import__(name)
from rlpar.buffers import trees
trees.kernels()
endef
export WARM_IMPORTS

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
ifneq ($(TORCH_WHEEL),)
	$(BIN)/python -m pip install -q -c constraints.txt uv
	$(BIN)/uv pip install -q --python $(BIN)/python --find-links $(WHEELS) -c constraints.txt -e '.[$(EXTRAS)]'
else
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[$(EXTRAS)]'
endif
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m compileall -q -j 0 rlpar envs algorithms experiments
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c "$$WARM_IMPORTS"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python -m experiments.apex

# Three pytest workers on CI's 2 cores: with two, the suite used 1.4 cores on average
# (its tests wait on other processes, sockets and sleeps): 334-337 s of tests against
# 258-363 s with three on one 2-core machine. With three the cores are busy all the time:
# the suite takes 660-710 core-seconds of CPU on three or four workers (590 on one, each
# process with a core to itself), so four workers (373 s) or one intra-op thread per
# process (355 s) gained nothing; only less work shortens it. Every test has a timeout
# well above its time beside two neighbours, and none asserts a wall-clock speed.
TEST_WORKERS ?= 3

# The manual is built with --strict (a broken link, anchor or API page fails) into a
# temporary directory, so a test run leaves no site/ behind (not --quiet: it hides the
# warnings from --strict too, which then passes).
# The suite writes bytecode files (__pycache__, ignored by git) even where the environment
# sets PYTHONDONTWRITEBYTECODE: without them each process the suite starts, and each rank
# importing what its zygote did not, compiled the project's sources again (a fifth of a
# local world's CPU).
test: $(STAMP)
	$(BIN)/ruff check .
	site=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir "$$site"; \
		status=$$?; rm -rf "$$site"; exit $$status
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

# The manual (docs/, mkdocs.yml) as a site in site/; `$(BIN)/mkdocs serve` to browse it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Peers measured side by side by experiments/bench (cpprb, Stable-Baselines3, ...) and the
# MuJoCo tasks of experiments.bench.continuous.budget.
bench-deps: $(STAMP)
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[$(EXTRAS),bench,mujoco]'

clean:
	rm -rf $(VENV) runs site .pytest_cache .ruff_cache
