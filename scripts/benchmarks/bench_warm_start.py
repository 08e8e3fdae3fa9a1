#!/usr/bin/env python
"""Does a warm start help? RF+BORE cold against RF+BORE warm-started with an earlier search's rows.

Objectives are surrogates of recorded real KGE trainings (``kgtuner.search.objectives.TableObjective``:
distance-weighted 3-nearest-neighbour regression over a ``scripts/data/kge_trial_table.py`` table), searched with
``--workers`` asynchronous simulated workers (``kgtuner.search.objectives.simulate``) for ``--evals``
evaluations. The warm start is the code path of ``search.warm_start``: the earlier search's rows are handed to
``RFBORESearcher.add_prior_observations`` as one label group (BORE labels within the group). Scenarios:

* ``same``: the earlier run searched the same objective with half the budget (seed + 1000);
* ``other``: the earlier run searched another graph's table (``--other``, e.g. the demo graph);
* ``sub2full``: the earlier run searched the stage-1 subgraph table, the new one the full-graph table
  (``--full``: the same configurations at larger sizes; the sizes are the rows' fidelity).

Every scenario is paired by seed with a cold search of the same seed. Reported per scenario: the final best
MRR (mean, paired difference warm - cold with its 95% t-interval and the Wilcoxon p), and the evaluations a
warm search needs to reach the cold search's final value (median; ``never`` counted as evals + 1). The
earlier run's own cost is not charged: it was paid by an earlier search.

Usage: python scripts/benchmarks/bench_warm_start.py --seeds 10 --evals 48 --workers 8 \
           --table docs/benchmarks/kge_tables/codex-s-sub.jsonl --other docs/benchmarks/kge_tables/demo.jsonl \
           --full docs/benchmarks/kge_tables/codex-s-full.jsonl --out docs/benchmarks/warm_start.parquet
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def _objective(path: str, full_space: bool = False):
    from kgtuner.search.objectives import TableObjective

    if not full_space:
        return TableObjective(path)
    # rows at stage-2 sizes: the table's space with batch/dim widened to the sizes recorded
    import json

    from kgtuner.search.loading import load_space
    from kgtuner.search.params import ChoiceParam
    from kgtuner.search.space import SearchSpace

    rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    sizes = {k: sorted({r["config"][k] for r in rows}) for k in ("batch_size", "dim")}
    base = load_space(rows[0]["space"], model=rows[0]["model"], dataset=rows[0]["dataset"])
    params = [ChoiceParam(p.name, sizes[p.name], p.conditions) if p.name in sizes else p for p in base.params]
    return TableObjective(path, space=SearchSpace(params, base.exclusions, None, name=f"{base.name}[sizes]"))


def _search(obj, seed: int, evals: int, workers: int, prior=None, same: bool = False):
    from kgtuner.search import RFBORESearcher
    from kgtuner.search.objectives import simulate

    s = RFBORESearcher(obj.space(), "value", "max", seed=seed, max_concurrent=workers)
    if prior:
        s.add_prior_observations(prior, "earlier", same_fidelity=same)
    seen = []

    def fn(cfg):
        v = obj(cfg)
        seen.append((dict(cfg), v, None))
        return v

    values = simulate(s, fn, evals, n_workers=workers, seed=seed)
    best = np.maximum.accumulate([-np.inf if v is None else v for v in values])
    return best, seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", default=str(REPO / "docs/benchmarks/kge_tables/codex-s-sub.jsonl"))
    ap.add_argument("--other", default=str(REPO / "docs/benchmarks/kge_tables/demo.jsonl"))
    ap.add_argument("--full", default=str(REPO / "docs/benchmarks/kge_tables/codex-s-full.jsonl"))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--evals", type=int, default=48)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--scenarios", nargs="+", default=["same", "other", "sub2full"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import pandas as pd
    from scipy import stats

    main_obj = _objective(args.table)
    rows = []
    for scenario in args.scenarios:
        if scenario == "same":
            source, target = main_obj, main_obj
        elif scenario == "other":
            source, target = _objective(args.other), main_obj
        else:
            source, target = main_obj, _objective(args.full, full_space=True)
        for seed in range(args.seeds):
            _, earlier = _search(source, seed + 1000, args.evals // 2, args.workers)
            cold, _ = _search(target, seed, args.evals, args.workers)
            warm, _ = _search(target, seed, args.evals, args.workers, prior=earlier, same=source is target)
            reach = np.flatnonzero(warm >= cold[-1] - 1e-12)
            rows.append({"scenario": scenario, "seed": seed, "cold": float(cold[-1]), "warm": float(warm[-1]),
                         "warm_evals_to_cold_final": int(reach[0]) + 1 if len(reach) else args.evals + 1,
                         "cold_evals_to_cold_final": int(np.flatnonzero(cold >= cold[-1] - 1e-12)[0]) + 1,
                         "prior_rows": len(earlier), "evals": args.evals, "workers": args.workers})
            print(f"{scenario} seed {seed}: cold {cold[-1]:.4f} warm {warm[-1]:.4f}", flush=True)
    df = pd.DataFrame(rows)
    if args.out:
        df.to_parquet(args.out, index=False)
    print(f"\n{args.evals} evaluations, {args.workers} workers, {args.seeds} paired seeds; warm start = an earlier "
          f"search's {args.evals // 2} rows as prior observations")
    print(f"{'scenario':>9} {'cold':>7} {'warm':>7}   warm-cold [95% CI]          Wilcoxon p   evals to reach "
          "cold's final: warm / cold (median)")
    for scenario, g in df.groupby("scenario", sort=False):
        d = (g.warm - g.cold).to_numpy()
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
        p = stats.wilcoxon(d).pvalue if np.any(d != 0) else 1.0
        print(f"{scenario:>9} {g.cold.mean():7.4f} {g.warm.mean():7.4f}   {d.mean():+.4f} [{d.mean() - half:+.4f}, "
              f"{d.mean() + half:+.4f}]   p={p:<9.3g}  {g.warm_evals_to_cold_final.median():.0f} / "
              f"{g.cold_evals_to_cold_final.median():.0f}")


if __name__ == "__main__":
    main()
