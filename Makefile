# kgtuner developer entry points. `make demo` and `make test` each set up .venv first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kgtuner-installed

.PHONY: setup demo test test-fast bench clean

setup: $(STAMP)

# torch is pinned and installed first so pip never pulls a multi-GB CUDA build as a dependency.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,tpe]'
	touch $(STAMP)

demo: setup
	$(BIN)/python -m kgtuner.launch

test: setup
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) .pytest_cache outputs multirun
