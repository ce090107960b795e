# Set-up on a fresh machine: `make train` (the main job) and `make test` both bootstrap .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= configs/tictactoe.toml
RUN_DIR ?= runs/tictactoe
# torch 2.13.0's CPU build: pip's configured indexes/find-links provide it here and in CI.
# Where pip sees only PyPI (whose Linux wheel pulls in CUDA, GBs), set
# TORCH_INDEX=https://download.pytorch.org/whl/cpu.
TORCH_INDEX ?=
TRAIN_ARGS ?=
TESTS ?=
# pytest-xdist workers for make test (the cluster tests take turns: tests/conftest.py).
WORKERS ?= 2

.PHONY: venv train test test-long device-rehearsal fuzz lint docs clean distclean

# setup.py builds the compiled MCTS core (actors/core/, its games in actors/core/games/): a
# changed, added or removed source reinstalls.
CORE_SOURCES := $(wildcard actors/core/*.c actors/core/*.h actors/core/games/*.c)
$(BIN)/azserve: pyproject.toml setup.py $(CORE_SOURCES) actors/core/games
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch first, pinned, so that installing the project never resolves another build.
	$(BIN)/pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(BIN)/azserve

# Rerunnable: continues the run in RUN_DIR when there is one; FRESH=1 starts a new numbered
# run beside it (RUN_DIR-2, RUN_DIR-3, ...). Either way the first line says which.
train: venv
	@if [ -z "$(FRESH)" ] && [ -f "$(RUN_DIR)/config.toml" ]; then \
		echo "make train: resuming the run in $(RUN_DIR) (make train FRESH=1 starts a new one)"; \
		$(BIN)/azserve train --config $(CONFIG) --run-dir $(RUN_DIR) --resume $(TRAIN_ARGS); \
	else \
		dir="$(RUN_DIR)"; n=1; \
		while [ -e "$$dir/config.toml" ]; do n=$$((n + 1)); dir="$(RUN_DIR)-$$n"; done; \
		echo "make train: a fresh run in $$dir"; \
		$(BIN)/azserve train --config $(CONFIG) --run-dir "$$dir" $(TRAIN_ARGS); \
	fi

test: venv
	scripts/system_deps.sh  # Slurm and munge for the cluster tests (root + apt only)
	AZSERVE_REQUIRE_COMPILED=1 $(BIN)/python -m pytest -q -n $(WORKERS) --dist loadgroup -m "not long" $(TESTS)

# The long forms (shogi's perft to depth 5 and beyond, 10,000 games in lockstep with cshogi):
# minutes each, so not in make test.
test-long: venv
	AZSERVE_REQUIRE_COMPILED=1 $(BIN)/python -m pytest -q -n $(WORKERS) -m long $(TESTS)

# The lent GPU machine's run, rehearsed on the CPU under its Python (3.12) and torch (2.11) with no
# package index: scripts/device/rehearse (docs/gpu.md). Needs no venv of its own; .ci/run calls it.
device-rehearsal:
	scripts/device/rehearse

fuzz: venv
	AZSERVE_FUZZ_EXAMPLES=200000 AZSERVE_FUZZ_TIMEOUT_S=3600 $(BIN)/python -m pytest -q tests/test_fuzz.py tests/test_fuzz_engines.py -p no:cacheprovider

lint: venv
	$(BIN)/ruff check azserve actors learner tests
	$(BIN)/ruff format --check azserve actors learner tests
	$(BIN)/mypy azserve actors learner

docs: venv
	$(BIN)/python -m azserve.config.docs > docs/config.md

# Outputs and caches; the virtual environment stays (distclean removes it too).
clean:
	rm -rf runs .pytest_cache build dist

distclean: clean
	rm -rf $(VENV)
