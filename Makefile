# trainyard: the two commands are `make up` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The package is installed (not editable) so that the mypyc-compiled core is what runs;
# any change under src/ reinstalls it. TRAINYARD_PURE=1 skips compilation (see setup.py).
SRC    := $(shell find src -name '*.py' -o -name '*.typed') setup.py pyproject.toml constraints.txt

.PHONY: up test lint typecheck bench clean venv

$(STAMP): $(SRC)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt '.[dev,torch]'
	@touch $(STAMP)

venv: $(STAMP)

## up: set up .venv and run the main job on the embedded default
up: $(STAMP)
	$(BIN)/trainyard demo

## test: set up .venv and run the whole suite (lint, types, tests)
test: $(STAMP) lint typecheck
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples setup.py
	$(BIN)/ruff format --check src tests bench examples setup.py

typecheck: $(STAMP)
	$(BIN)/mypy

## bench: scheduler benchmarks (JSON on stdout)
bench: $(STAMP)
	$(BIN)/python bench/scheduler.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
	find src -name '*.so' -delete
