"""How long RF+BORE's forest takes to fit and predict: scikit-learn's ``RandomForestClassifier`` (the anchor)
against kgtuner's direct build of the same trees (``kgtuner.search.forest.TreeChunk``), in one process.

The data have the shape of a search's: ``--rows`` finished trials (encoded configurations, ``--features``
columns, a quarter labelled good), a forest of ``--trees`` trees refit as RF+BORE refits it, and the scores of
``--candidates`` configurations. Each round times both builds of the same forest and checks that their
probabilities are equal, bit for bit. Prints each size's medians and their ratio.

With ``--replay TABLE`` it also replays one search on a recorded table (``kgtuner bench replay``'s cell:
``--algorithm`` at one worker, ``--budget`` mean full-graph trials, seed 0) twice, with each forest, and checks
that both made the same search (trials, answer, test MRR).

    python scripts/perf/bench_forest.py [--rows 50 200 400] [--rounds 3] [--replay docs/benchmarks/superseded/tables/codex-m]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[50, 200, 400])
    ap.add_argument("--features", type=int, default=16)
    ap.add_argument("--trees", type=int, default=200)
    ap.add_argument("--candidates", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--replay", metavar="TABLE", help="also time one replayed search on this recorded table")
    ap.add_argument("--algorithm", default="kgtuner")
    ap.add_argument("--budget", type=float, default=30.0)
    args = ap.parse_args()

    from kgtuner.search.forest import SklearnChunk, TreeChunk, fast_trees_available

    print(f"direct tree build matches RandomForestClassifier here: {fast_trees_available()}")
    rng = np.random.default_rng(0)
    for n in args.rows:
        X = rng.random((n, args.features))
        X[:, : args.features // 2] = np.round(X[:, : args.features // 2] * 3)  # categorical columns: ties
        y = (rng.random(n) < 0.25).astype(int)
        y[:2] = [0, 1]
        cand = rng.random((args.candidates, args.features))
        times = {"sklearn": ([], []), "direct": ([], [])}
        for r in range(args.rounds):
            probs = {}
            for name, cls in (("sklearn", SklearnChunk), ("direct", TreeChunk)):
                t0 = time.perf_counter()
                chunk = cls(args.trees, seed=r).fit(X, y)
                t1 = time.perf_counter()
                probs[name] = chunk.proba1(cand)
                t2 = time.perf_counter()
                times[name][0].append(t1 - t0)
                times[name][1].append(t2 - t1)
            if not np.array_equal(probs["sklearn"], probs["direct"]):
                raise SystemExit(f"rows {n}, round {r}: the two forests' probabilities differ")
        fit = {k: statistics.median(v[0]) for k, v in times.items()}
        pred = {k: statistics.median(v[1]) for k, v in times.items()}
        print(f"{n:4d} rows, {args.trees} trees: fit {fit['sklearn'] * 1e3:7.1f} ms (sklearn) vs "
              f"{fit['direct'] * 1e3:6.1f} ms (direct), {fit['sklearn'] / fit['direct']:5.1f}x; predict "
              f"{args.candidates}: {pred['sklearn'] * 1e3:6.1f} vs {pred['direct'] * 1e3:5.1f} ms, "
              f"{pred['sklearn'] / pred['direct']:4.1f}x; probabilities equal in every round")
    if args.replay:
        replay_both(args.replay, args.algorithm, args.budget)


def replay_both(table_dir: str, algorithm: str, budget: float) -> None:
    from kgtuner.bench.benchmark import run_cell
    from kgtuner.bench.replay import ReplayTable
    from kgtuner.search import forest

    table = ReplayTable.load(table_dir)
    rows = {}
    for name, fast in (("direct", True), ("sklearn", False)):
        forest._FAST = fast  # which build RollingForest uses (the check at first use is skipped)
        t0 = time.perf_counter()
        rows[name] = run_cell(table, algorithm, 1, budget, 0)
        rows[name]["_s"] = time.perf_counter() - t0
    keys = ("trials", "trials_stage2", "answer_run", "valid_mrr", "test_mrr", "end_s")
    same = all(rows["direct"][k] == rows["sklearn"][k] for k in keys)
    print(f"replay of {algorithm} on {table_dir} (1 worker, budget {budget:g}, seed 0, {rows['direct']['trials']} "
          f"trials): {rows['sklearn']['_s']:.1f} s with RandomForestClassifier vs {rows['direct']['_s']:.1f} s "
          f"direct, {rows['sklearn']['_s'] / rows['direct']['_s']:.1f}x; searcher time {rows['sklearn']['searcher_s']:.1f}"
          f" vs {rows['direct']['searcher_s']:.1f} s; the same search: {same}")
    if not same:
        raise SystemExit({k: (rows["direct"][k], rows["sklearn"][k]) for k in keys})


if __name__ == "__main__":
    main()
