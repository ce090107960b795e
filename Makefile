# Set-up on a fresh machine: `make train` (the main job) and `make test` both bootstrap .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= configs/tictactoe.toml
RUN_DIR ?= runs/tictactoe

.PHONY: venv train test fuzz lint bench clean

$(BIN)/azserve: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch first, from the pinned CPU wheel, so pip never resolves a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(BIN)/azserve

train: venv
	$(BIN)/azserve train --config $(CONFIG) --run-dir $(RUN_DIR)

test: venv
	scripts/system_deps.sh  # Slurm and munge for the cluster tests (root + apt only)
	$(BIN)/python -m pytest -q

fuzz: venv
	AZSERVE_FUZZ_EXAMPLES=200000 $(BIN)/python -m pytest -q tests/test_fuzz.py -p no:cacheprovider

lint: venv
	$(BIN)/ruff check azserve actors learner tests
	$(BIN)/ruff format --check azserve actors learner tests
	$(BIN)/mypy azserve

clean:
	rm -rf $(VENV) runs .pytest_cache
