# kgtuner developer entry points. `make demo` and `make test` each set up .venv first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kgtuner-installed

.PHONY: setup demo test test-all test-fast docker-check benchmarks clean

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

# CI's command, in two runs. First the tests that start neither Ray nor a kgtuner launch, $(TEST_JOBS) at a time
# (pytest-xdist); then those marked `serial` -- launches, Ray clusters, fault injections, whose time budgets and
# timeouts need the machine's cores -- one at a time, as before. The few tests marked `long` (each a minute or more
# of fault injection whose guarantee another test here covers too) run with `make test-all`, before a release.
TEST_JOBS ?= 2
test: setup
	$(BIN)/python -X faulthandler -m pytest -q -m "not long and not serial" -n $(TEST_JOBS) --durations=15
	$(BIN)/python -X faulthandler -m pytest -q -m "not long and serial" --durations=25

test-all: setup
	$(BIN)/python -X faulthandler -m pytest -q -m "not serial" -n $(TEST_JOBS) --durations=15
	$(BIN)/python -X faulthandler -m pytest -q -m serial --durations=25

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

# Pre-release check of the Docker files, not CI's (about 10 minutes from nothing; needs root and the package registries):
# builds docker/Dockerfile on a local Debian base, runs the demo and trains its answer in the image with no network,
# submits the demo to a containerised Ray head with scripts/ops/submit.sh, checks docker/compose.yaml. Its output is
# committed: docs/docker/docker_check.txt.
docker-check: setup
	bash scripts/ops/docker_check.sh --log docs/docker/docker_check.txt

# Search-efficiency benchmarks, ablations and docs/benchmarks.md (about 3.5 hours on 2 cores: 2.5 for the large
# suite on codex-m and WN18RR, 1 for the small graphs; needs ../shared/datasets). Finished searches are kept in
# outputs/, so an interrupted run continues.
benchmarks: setup
	$(BIN)/python scripts/benchmarks/bench_search.py --suite large --out outputs/bench_search_large
	for ds in codex-m wn18rr; do $(BIN)/python scripts/benchmarks/bench_ablation.py --dataset $$ds --model complex \
		--configs 12 --samplers multi_rw --ratios 0.2 --sampler-ratio 0.2 --seeds 0 1 --full-seeds 0 1 --jobs 2 \
		--out outputs/bench_ablation_$$ds || exit 1; done
	$(BIN)/python scripts/benchmarks/bench_search.py --suite large --datasets codex-s --out outputs/bench_search_large
	$(BIN)/python scripts/benchmarks/bench_search.py --suite main --out outputs/bench_search
	$(BIN)/python scripts/benchmarks/bench_search.py --suite ablation --out outputs/bench_search_ablation
	$(BIN)/python scripts/benchmarks/bench_ablation.py --dataset codex-s --configs 16 --max-steps 5000 --max-epochs 5 \
		--valid-every 250 --out outputs/bench_ablation
	$(BIN)/python scripts/benchmarks/benchmarks_page.py --collect

clean:
	rm -rf $(VENV) .pytest_cache outputs multirun
