"""The searchers' own computing time (issue 37, part 3), on the replay path and on the live path.

    python scripts/perf/profile_searcher_time.py replay kgtuner_asha 8 30   # one replayed search (codex-m table)
    python scripts/perf/profile_searcher_time.py live                         # RFBORESearcher per suggestion

``replay ALGORITHM WORKERS BUDGET``: one search replayed on ``docs/benchmarks/superseded/tables/codex-m`` (seed 1, after a
warm-up search), its searcher seconds against its simulated budget, and the cProfile of the hot functions.
``live``: 200 suggestions of the stage-1 RF+BORE searcher (decoupled space, 8 pending, surrogate objective), the
milliseconds per suggestion as the search grows, and one state save. Wall seconds: they carry the machine's load.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import tempfile
import time

import numpy as np


def replay(algorithm: str, workers: int, budget: float) -> None:
    from kgtuner.bench import benchmark
    from kgtuner.bench.replay import ReplayTable

    table = ReplayTable.load("docs/benchmarks/superseded/tables/codex-m")
    benchmark.run_cell(table, algorithm, workers, 10.0, 0)  # warm-up (imports, caches)
    prof = cProfile.Profile()
    prof.enable()
    row = benchmark.run_cell(table, algorithm, workers, budget, 1)
    prof.disable()
    print(f"{algorithm}, {workers} workers, budget {budget:g}: {row['trials']} trials, searcher {row['searcher_s']:.2f} s "
          f"of {row['budget_s']:.1f} simulated s ({row['searcher_s'] / row['budget_s']:.1%})")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(r"rf_bore|forest|space", 12)


def live() -> None:
    from kgtuner.search import RFBORESearcher, load_space
    from kgtuner.search.objectives import kge_surrogate

    s = RFBORESearcher(load_space("decoupled", model="complex"), metric="valid_mrr", mode="max", seed=0,
                       max_concurrent=8)
    times = []
    for i in range(200):
        t = time.perf_counter()
        cfg = s.suggest(f"t{i}")
        times.append(time.perf_counter() - t)
        v = kge_surrogate(cfg)
        s.on_trial_complete(f"t{i}", None if v is None else {"valid_mrr": v}, error=v is None)
    ms = [1000 * float(np.mean(x)) for x in (times[:10], times[10:50], times[150:])]
    print("ms per suggestion: first 10 %.1f, 10-50 %.1f, 150-200 %.1f" % tuple(ms))
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        s.save(os.path.join(d, "state.json"))
        print(f"state save {1000 * (time.perf_counter() - t):.1f} ms, {os.path.getsize(os.path.join(d, 'state.json')) / 1024:.0f} KB")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "live":
        live()
    elif len(sys.argv) == 5 and sys.argv[1] == "replay":
        replay(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(__doc__)
