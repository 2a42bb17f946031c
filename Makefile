# trainyard: the two commands are `make up` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The package is installed (not editable) so that the mypyc-compiled core is what runs;
# any change under src/ reinstalls it, package data included (the console's templates and
# static files, the planner's published runs). TRAINYARD_PURE=1 skips compilation (setup.py).
SRC    := $(shell find src -type f -not -path '*/__pycache__/*' -not -path '*.egg-info/*') \
          setup.py pyproject.toml constraints.txt

.PHONY: up test lint typecheck bench clean venv

$(STAMP): $(SRC)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# the stamp takes the time the install began: a source changed while it runs is newer
	@# than the stamp, so the next make installs again (it was kept stale before)
	@touch $(STAMP).began
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# setuptools builds from build/lib*, which keeps modules that were renamed or removed
	@# since; they would be installed again beside their new names
	rm -rf build/lib* src/trainyard.egg-info
	$(BIN)/python -m pip install --quiet -c constraints.txt '.[dev,torch,ray]'
	@mv $(STAMP).began $(STAMP)

venv: $(STAMP)

EXAMPLES := examples/jobs/ddp/job.yaml examples/jobs/single/job.yaml examples/jobs/fail/job.yaml

## up: set up .venv and run the platform on this machine with the example jobs (Ctrl-C stops
## it). Real GPUs are used when NVML finds some; otherwise 4 virtual GPUs are declared and
## labelled as such. UP_ARGS adds options, e.g. UP_ARGS=--exit-when-done.
up: $(STAMP)
	$(BIN)/trainyard up --virtual-gpus 4 $(addprefix --submit ,$(EXAMPLES)) $(UP_ARGS)

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
