# Two commands do all the set-up on a fresh machine:
#   make serve   -> .venv with gpupool, then the server on 127.0.0.1:8765
#   make test    -> .venv with test tools, system packages the tests use, then every test tier
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=
# pytest workers: the tests mostly wait on servers and jobs, so two workers finish a 2-core
# machine's run about 1.5x sooner; WORKERS=0 runs them in one process
WORKERS ?= 2

.PHONY: serve test lint format bench clean system-deps serve-deps

serve: $(VENV)/.runtime serve-deps
	$(BIN)/gpupool server $(ARGS)

test: $(VENV)/.dev system-deps
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	scripts/loopback-only $(BIN)/pytest -q -n $(WORKERS) --dist loadgroup --durations=15 $(ARGS)

system-deps:
	bash scripts/install-system-deps.sh test

serve-deps:
	bash scripts/install-system-deps.sh serve

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

format: $(VENV)/.dev
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

bench: $(VENV)/.dev
	$(BIN)/python benchmarks/latency.py
	$(BIN)/python benchmarks/submit_rate.py
	$(BIN)/python benchmarks/drain.py
	$(BIN)/python benchmarks/scheduler_scale.py
	$(BIN)/python benchmarks/philly_replay.py
	$(BIN)/python benchmarks/signin_timing.py
	$(BIN)/python benchmarks/cli_startup.py
	$(BIN)/python benchmarks/pool_start.py
	$(BIN)/python benchmarks/pool_drain.py
	$(BIN)/python benchmarks/proxy_overhead.py
	$(BIN)/python benchmarks/metrics_ingest.py
	$(BIN)/python benchmarks/notebook_start.py
	$(BIN)/python benchmarks/model_pack.py
	$(BIN)/python benchmarks/experiments.py

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.runtime: pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q -e .
	touch $@

# The test venv adds the 'distributed' extra (torch's CPU build, mpi4py) for the distributed
# training tests, and 'serving' (onnxruntime) for the built-in model server's: about 50 s and
# 900 MB more in the venv, so `make serve` (.runtime) goes without.
$(VENV)/.dev: pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q -e '.[dev,distributed,serving]'
	touch $(VENV)/.runtime $@

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .ruff_cache
