#!/usr/bin/env python
"""Benchmark of kgtuner's searchers (issues 4 and 12).

1. Suggestion latency of RFBORESearcher at 10 / 100 / 500 finished trials (full space, 8 pending
   trials, steady state: each suggestion follows one completion), for the previous defaults and
   today's, as medians and as a ratio to an anchor measured in the same run on the same data: one
   plain ``RandomForestClassifier(n_estimators=200)`` fit + one ``predict_proba`` of 10,000
   candidates (the reference code's way).
2. Sample efficiency with asynchronous workers (``--workers 8``, or several counts: ``--workers 1 8``)
   on the test functions of ``kgtuner.search.objectives`` and, with ``--tables``, on surrogates of
   real KGE searches (``TableObjective`` over results of ``scripts/data/kge_trial_table.py``): best value
   after k evaluations (mean over seeds), the median final best, repeated configurations, the
   crowding of concurrent suggestions (distance to the nearest pending one) and the mean rank of every
   algorithm over objectives x seeds, for random search, TPE (Optuna) and the RF+BORE variants of
   ``RF_VARIANTS`` (candidate generation, forest refresh, batch diversification).

Usage: python scripts/benchmarks/bench_searcher.py [--seeds 6] [--evals 60] [--workers 1 8] [--jobs 2]
       [--tables outputs/kge_tables/demo.jsonl ...] [--objectives ...] [--algorithms ...]
       [--skip-latency] [--skip-efficiency]
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
    cand = space.encode_array(space.sample_array(np.random.default_rng(0), 10_000))
    anchor = []
    for _ in range(3):
        t0 = time.perf_counter()
        RandomForestClassifier(n_estimators=200, random_state=0).fit(X, y).predict_proba(cand)
        anchor.append(time.perf_counter() - t0)
    return {"suggest_ms": 1e3 * np.median(sug), "cycle_ms": 1e3 * np.median(cyc),
            "anchor_ms": 1e3 * np.median(anchor)}


#: RF+BORE variants compared (keyword arguments over the defaults of ``RFBORESearcher``), named by
#: their candidates (uniform: random samples only; reference: 10,000 random samples plus two rounds of
#: evolution, the reference code's scheme), forest refresh (rolling: 40 of 200 trees refit per
#: update; refit: the whole forest) and batch strategy (thompson: tree draws while trials are pending;
#: liar: pending trials as pseudo-negatives). "previous" = the defaults before issue 12.
RF_VARIANTS = {
    "rf_bore[previous]": dict(n_candidates=2048, evolve_rounds=0, trees_per_fit=40, batch="none"),
    "rf_bore[uniform,refit]": dict(n_candidates=2048, evolve_rounds=0, batch="none"),
    "rf_bore[uniform,refit,thompson]": dict(n_candidates=2048, evolve_rounds=0, batch="thompson"),
    "rf_bore[uniform,refit,thompson,liar]": dict(n_candidates=2048, evolve_rounds=0, batch="thompson",
                                                 pending="pseudo_negative"),
    "rf_bore[uniform10k,refit,thompson]": dict(n_candidates=10000, evolve_rounds=0, batch="thompson"),
    "rf_bore[reference,refit]": dict(n_candidates=10000, evolve_rounds=2, batch="none"),
    "rf_bore[reference,refit,liar]": dict(n_candidates=10000, evolve_rounds=2, batch="none", pending="pseudo_negative"),
    "rf_bore[reference,refit,thompson]": dict(n_candidates=10000, evolve_rounds=2, batch="thompson"),
    "rf_bore[reference,refit,thompson,liar]": dict(n_candidates=10000, evolve_rounds=2, batch="thompson",
                                                   pending="pseudo_negative"),
    "rf_bore[default]": dict(),  # RFBORESearcher's (and conf/search/*.yaml's) defaults, whatever they are
}


def make(alg: str, space, seed: int, n_workers: int, rf_kw: dict):
    from kgtuner.search import RandomSearcher, RFBORESearcher
    from kgtuner.search.tpe import make_tpe_searcher

    if alg == "random":
        return RandomSearcher(space, "value", "max", seed=seed, max_concurrent=n_workers)
    if alg == "tpe":
        return make_tpe_searcher(space, "value", "max", seed=seed)
    return RFBORESearcher(space, "value", "max", seed=seed, max_concurrent=n_workers,
                          **{**RF_VARIANTS[alg], **rf_kw})


def _crowding(space, cfg: dict, pending: list[dict]) -> float | None:
    """Distance of a new suggestion to the nearest configuration still pending: the mean over the
    parameters of |difference| (unit scale) for ranges and 0/1 for choices and activity; None when
    nothing is pending. Small values mean the batch crowds around one point."""
    if not pending:
        return None
    rows = space.to_array([cfg, *pending])
    a, b = rows[0], rows[1:]
    cont = space.continuous_mask
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    with np.errstate(invalid="ignore"):
        diff = np.where(cont, np.abs(a - b), (a != b).astype(float))
    diff = np.where(nan_a & nan_b, 0.0, np.where(nan_a | nan_b, 1.0, diff))
    return float(diff.mean(axis=1).min())


def _objectives(tables: list[str]) -> dict:
    from kgtuner.search.objectives import OBJECTIVES, TableObjective

    out = dict(OBJECTIVES)
    for path in tables:
        obj = TableObjective(path).objective()
        out[obj.name] = obj
    return out


def efficiency_run(args) -> tuple:
    from kgtuner.search.objectives import best_so_far, simulate

    obj_name, alg, seed, n_evals, n_workers, rf_kw, tables = args
    obj = _objectives(tables)[obj_name]
    t0 = time.perf_counter()
    space = obj.space()
    searcher = make(alg, space, seed, n_workers, rf_kw)
    seen, dups, crowd, pending = set(), [0], [], {}
    suggest, complete = searcher.suggest, searcher.on_trial_complete

    def counting_suggest(trial_id):  # count exact repeats, measure crowding of the pending batch
        cfg = suggest(trial_id)
        if isinstance(cfg, dict):
            key = tuple(sorted((k, round(v, 9) if isinstance(v, float) else v) for k, v in cfg.items()))
            dups[0] += key in seen
            seen.add(key)
            c = _crowding(space, cfg, list(pending.values()))
            if c is not None:
                crowd.append(c)
            pending[trial_id] = cfg
        return cfg

    def tracking_complete(trial_id, *a, **kw):
        pending.pop(trial_id, None)
        return complete(trial_id, *a, **kw)

    searcher.suggest, searcher.on_trial_complete = counting_suggest, tracking_complete
    vals = simulate(searcher, obj.fn, n_evals, n_workers=n_workers, seed=seed)
    return (obj_name, alg, seed, best_so_far(vals), time.perf_counter() - t0, dups[0],
            float(np.mean(crowd)) if crowd else float("nan"), n_workers)


def _nanmean(values: list[float]) -> float:
    """Mean of the finite values (NaN when none: nothing was ever pending, e.g. one worker)."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--evals", type=int, default=60)
    ap.add_argument("--workers", type=int, nargs="+", default=[8], help="concurrent (simulated) trials")
    ap.add_argument("--jobs", type=int, default=2, help="processes for the efficiency runs")
    ap.add_argument("--repeats", type=int, default=15, help="timed suggestions per latency point")
    ap.add_argument("--tables", nargs="*", default=[],
                    help="real-KGE tables from scripts/data/kge_trial_table.py (objectives kge_<file stem>)")
    ap.add_argument("--objectives", nargs="*", default=None, help="objectives to run (default: all)")
    ap.add_argument("--algorithms", nargs="*", default=None, help="algorithms to run (default: all)")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-efficiency", action="store_true")
    args = ap.parse_args()

    if not args.skip_latency:
        print("## Suggestion latency (full space, 8 pending; medians)")
        print(f"{'observations':>12} {'searcher':>28} {'suggest ms':>10} {'complete+suggest ms':>19} "
              f"{'anchor ms':>9} {'ratio':>6}")
        for n_obs in (10, 100, 500):
            for label in ("rf_bore[previous]", "rf_bore[default]"):
                r = latency(n_obs, args.repeats, **RF_VARIANTS[label])
                print(f"{n_obs:>12} {label:>28} {r['suggest_ms']:>10.1f} {r['cycle_ms']:>19.1f} "
                      f"{r['anchor_ms']:>9.1f} {r['suggest_ms'] / r['anchor_ms']:>6.2f}", flush=True)
        print("anchor = RandomForestClassifier(200).fit + predict_proba(10,000) on the same data, same run;"
              " ratio = suggest / anchor\n")

    if not args.skip_efficiency:
        objectives = _objectives(args.tables)
        names = args.objectives or list(objectives)
        rf_kw = {}
        algs = args.algorithms or ["random", "tpe", *RF_VARIANTS]
        unknown = sorted(set(algs) - {"random", "tpe", *RF_VARIANTS})
        if unknown:
            raise SystemExit(f"unknown algorithm(s) {unknown}; choose from random, tpe, {', '.join(RF_VARIANTS)}")
        tasks = [(o, a, s, args.evals, w, rf_kw, args.tables) for w in args.workers for o in names
                 for a in algs for s in range(args.seeds)]
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(efficiency_run, tasks))
        checkpoints = [k for k in (10, 20, 40, 60, 80, 100, 150, 200) if k <= args.evals]
        for w in args.workers:
            print(f"\n## Sample efficiency: mean best value after k evaluations over {args.seeds} seeds, "
                  f"{w} asynchronous worker(s)")
            ranks = {a: [] for a in algs}
            for obj_name in names:
                obj = objectives[obj_name]
                print(f"\n### {obj_name} (best known {obj.optimum:g}, maximised)")
                print(f"{'algorithm':>33} " + " ".join(f"{'k=' + str(k):>8}" for k in checkpoints)
                      + f" {'median@end':>10} {'repeats':>7} {'crowding':>8} {'s/run':>6}")
                ends = {}
                for alg in algs:
                    rows = [r for r in results if r[0] == obj_name and r[1] == alg and r[7] == w]
                    curves = np.array([r[3] for r in rows])
                    means = [np.mean(curves[:, k - 1]) for k in checkpoints]
                    ends[alg] = curves[:, -1]
                    print(f"{alg:>33} " + " ".join(f"{m:>8.4f}" for m in means)
                          + f" {np.median(curves[:, -1]):>10.4f} {np.mean([r[5] for r in rows]):>7.1f}"
                          + f" {_nanmean([r[6] for r in rows]):>8.3f} {np.mean([r[4] for r in rows]):>6.1f}")
                # rank of each algorithm per seed by the final best value (1 = best; ties share)
                table = np.array([ends[a] for a in algs])
                for j in range(table.shape[1]):
                    order = table[:, j]
                    for i, a in enumerate(algs):
                        ranks[a].append(1 + np.sum(order > order[i]) + 0.5 * (np.sum(order == order[i]) - 1))
            print(f"\nmean rank over objectives x seeds ({w} worker(s)): "
                  + ", ".join(f"{a} {np.mean(r):.2f}" for a, r in sorted(ranks.items(), key=lambda kv: np.mean(kv[1]))))
        print("\nrepeats = suggestions equal to an earlier finished or pending configuration, per run; "
              "crowding = mean distance of a suggestion to the nearest pending one (0 = same point, 1 = every "
              "parameter differs)")


if __name__ == "__main__":
    main()
