#!/usr/bin/env python
"""Benchmark of kgtuner's searchers (issue 4).

1. Suggestion latency of RFBORESearcher at 10 / 100 / 500 finished trials (full space, 8 pending
   trials, steady state: each suggestion follows one completion). Reported as medians and as a
   ratio to an anchor measured in the same run on the same data: one plain
   ``RandomForestClassifier(n_estimators=200)`` fit + one ``predict_proba`` of the candidate pool
   (what a suggestion costs when the whole forest is refit every time, the reference's way).
2. Sample efficiency on the two test functions of ``kgtuner.search.objectives``: best value found
   after k evaluations, mean over seeds, for random search, Optuna TPE (through Ray's
   OptunaSearch), RF+BORE (default: pending trials excluded), RF+BORE with pending trials as
   pseudo-negatives, and with pending trials ignored ("doing nothing"), with asynchronous workers;
   also the number of repeated configurations per run.

Usage: python scripts/bench_searcher.py [--seeds 6] [--evals 60] [--workers 8] [--jobs 2]
       [--n-trees 200 --trees-per-fit 40 --n-candidates 2048] [--skip-latency] [--skip-efficiency]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np


def latency(n_obs: int, repeats: int, **kw) -> dict:
    from sklearn.ensemble import RandomForestClassifier

    from kgtuner.search import RandomSearcher, RFBORESearcher, load_space
    from kgtuner.search.objectives import kge_surrogate

    space = load_space("full")
    s = RFBORESearcher(space, metric="valid_mrr", mode="max", seed=0, max_concurrent=8, **kw)
    warm = RandomSearcher(space, "valid_mrr", "max", seed=1)
    for i in range(n_obs):
        cfg = warm.suggest(f"w{i}")
        s.add_evaluated_point(cfg, kge_surrogate(cfg) or 0.0, error=kge_surrogate(cfg) is None)
    live = []
    for i in range(8):  # fill the 8 slots (the first model fit happens here)
        live.append((f"p{i}", s.suggest(f"p{i}")))
    sug, cyc = [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        tid, cfg = live.pop(0)
        v = kge_surrogate(cfg)
        s.on_trial_complete(tid, None if v is None else {"valid_mrr": v}, error=v is None)
        t1 = time.perf_counter()
        live.append((f"q{i}", s.suggest(f"q{i}")))
        t2 = time.perf_counter()
        sug.append(t2 - t1)
        cyc.append(t2 - t0)
    # anchor: a full 200-tree forest fit + one predict_proba on this data and candidate pool size
    X = space.encode([c for c, _ in s.observations()])
    y = (np.arange(len(X)) % 4 == 0).astype(int)
    cand = space.encode_array(space.sample_array(np.random.default_rng(0), s.n_candidates))
    anchor = []
    for _ in range(3):
        t0 = time.perf_counter()
        RandomForestClassifier(n_estimators=200, random_state=0).fit(X, y).predict_proba(cand)
        anchor.append(time.perf_counter() - t0)
    return {"suggest_ms": 1e3 * np.median(sug), "cycle_ms": 1e3 * np.median(cyc),
            "anchor_ms": 1e3 * np.median(anchor)}


def make(alg: str, space, seed: int, n_workers: int, rf_kw: dict):
    from kgtuner.search import RandomSearcher, RFBORESearcher
    from kgtuner.search.tpe import make_tpe_searcher

    if alg == "random":
        return RandomSearcher(space, "value", "max", seed=seed, max_concurrent=n_workers)
    if alg == "tpe":
        return make_tpe_searcher(space, "value", "max", seed=seed)
    pending = {"rf_bore": "exclude", "rf_bore[pending=pseudo_negative]": "pseudo_negative",
               "rf_bore[pending=ignore]": "ignore"}[alg]
    return RFBORESearcher(space, "value", "max", seed=seed, max_concurrent=n_workers, pending=pending, **rf_kw)


def efficiency_run(args) -> tuple:
    from kgtuner.search.objectives import OBJECTIVES, best_so_far, simulate

    obj_name, alg, seed, n_evals, n_workers, rf_kw = args
    obj = OBJECTIVES[obj_name]
    t0 = time.perf_counter()
    searcher = make(alg, obj.space(), seed, n_workers, rf_kw)
    seen, dups = set(), [0]
    suggest = searcher.suggest

    def counting_suggest(trial_id):  # count exact repeats of an earlier (finished or pending) config
        cfg = suggest(trial_id)
        if isinstance(cfg, dict):
            key = tuple(sorted((k, round(v, 9) if isinstance(v, float) else v) for k, v in cfg.items()))
            dups[0] += key in seen
            seen.add(key)
        return cfg

    searcher.suggest = counting_suggest
    vals = simulate(searcher, obj.fn, n_evals, n_workers=n_workers, seed=seed)
    return obj_name, alg, seed, best_so_far(vals), time.perf_counter() - t0, dups[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--evals", type=int, default=60)
    ap.add_argument("--workers", type=int, default=8, help="concurrent (simulated) trials")
    ap.add_argument("--jobs", type=int, default=2, help="processes for the efficiency runs")
    ap.add_argument("--repeats", type=int, default=15, help="timed suggestions per latency point")
    ap.add_argument("--n-trees", type=int, default=200, help="RF+BORE forest in the efficiency runs")
    ap.add_argument("--trees-per-fit", type=int, default=40, help="0 = refit the whole forest")
    ap.add_argument("--n-candidates", type=int, default=2048)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-efficiency", action="store_true")
    args = ap.parse_args()

    if not args.skip_latency:
        print("## Suggestion latency (full space, 8 pending, n_candidates=2048; medians)")
        print(f"{'observations':>12} {'forest':>26} {'suggest ms':>10} {'complete+suggest ms':>19} "
              f"{'anchor ms':>9} {'ratio':>6}")
        for n_obs in (10, 100, 500):
            for label, kw in (("200 trees, 40 refit/update", {}),
                              ("200 trees, full refit", {"trees_per_fit": None})):
                r = latency(n_obs, args.repeats, **kw)
                print(f"{n_obs:>12} {label:>26} {r['suggest_ms']:>10.1f} {r['cycle_ms']:>19.1f} "
                      f"{r['anchor_ms']:>9.1f} {r['suggest_ms'] / r['anchor_ms']:>6.2f}", flush=True)
        print("anchor = RandomForestClassifier(200).fit + predict_proba(2048) on the same data, same run;"
              " ratio = suggest / anchor\n")

    if not args.skip_efficiency:
        from kgtuner.search.objectives import OBJECTIVES

        rf_kw = {"n_trees": args.n_trees, "trees_per_fit": args.trees_per_fit or None,
                 "n_candidates": args.n_candidates}
        algs = ["random", "tpe", "rf_bore", "rf_bore[pending=pseudo_negative]", "rf_bore[pending=ignore]"]
        tasks = [(o, a, s, args.evals, args.workers, rf_kw) for o in OBJECTIVES for a in algs
                 for s in range(args.seeds)]
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(efficiency_run, tasks))
        checkpoints = [k for k in (10, 20, 40, 60, 80, 100, 150, 200) if k <= args.evals]
        print(f"## Sample efficiency: mean best value after k evaluations over {args.seeds} seeds, "
              f"{args.workers} asynchronous workers (RF+BORE: {rf_kw})")
        for obj_name, obj in OBJECTIVES.items():
            print(f"\n### {obj_name} (optimum {obj.optimum:g}, maximised)")
            print(f"{'algorithm':>33} " + " ".join(f"{'k=' + str(k):>9}" for k in checkpoints)
                  + f" {'median@end':>10} {'repeats':>7} {'s/run':>6}")
            for alg in algs:
                rows = [r for r in results if r[0] == obj_name and r[1] == alg]
                curves = np.array([r[3] for r in rows])
                means = [np.mean(curves[:, k - 1]) for k in checkpoints]
                print(f"{alg:>33} " + " ".join(f"{m:>9.4f}" for m in means)
                      + f" {np.median(curves[:, -1]):>10.4f} {np.mean([r[5] for r in rows]):>7.1f}"
                      + f" {np.mean([r[4] for r in rows]):>6.1f}")
        print("\nrepeats = suggestions equal to an earlier finished or pending configuration, per run")


if __name__ == "__main__":
    main()
