# Two entry points (README quick start): `make run` and `make test`.
# Each creates .venv on first use, with the versions pinned in constraints.txt.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# atari: envs.atari and its equivalence tests against gymnasium's wrappers run in CI too;
# minatar: the MinAtar envs and the small-image conv nets' tests on them.
EXTRAS ?= dev,mpe,atari,minatar,video

.PHONY: run test lint bench-deps clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[$(EXTRAS)]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python -m experiments.apex

# Two pytest workers: most tests leave one of CI's 2 cores idle (a process waits on
# another, on a socket or a sleep); tests that need both still pass beside a neighbour.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

# Peers measured side by side by experiments/bench (cpprb, Stable-Baselines3, ...) and the
# MuJoCo tasks of experiments.bench.continuous.
bench-deps: $(STAMP)
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[$(EXTRAS),bench,mujoco]'

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
