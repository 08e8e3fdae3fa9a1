# kgtuner developer entry points. `make demo` and `make test` each set up .venv first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kgtuner-installed

.PHONY: setup demo test test-fast benchmarks clean

setup: $(STAMP)

# torch is pinned and installed first so pip never pulls a multi-GB CUDA build as a dependency.
$(STAMP): pyproject.toml setup.py
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

# Search-efficiency benchmark, ablations and docs/benchmarks.md (about an hour on 2 cores; needs
# ../shared/datasets). Finished searches are kept in outputs/, so an interrupted run continues.
benchmarks: setup
	$(BIN)/python scripts/bench_search.py --suite main --out outputs/bench_search
	$(BIN)/python scripts/bench_search.py --suite ablation --out outputs/bench_search_ablation
	$(BIN)/python scripts/bench_ablation.py --dataset codex-s --configs 16 --max-steps 5000 --max-epochs 5 \
		--valid-every 250 --out outputs/bench_ablation
	$(BIN)/python scripts/benchmarks_page.py

clean:
	rm -rf $(VENV) .pytest_cache outputs multirun
