#!/usr/bin/env python
"""KGTuner's stage 2, warm-started forest against the ordered start, replayed on recorded real trials.

The record (fixed before any replay): ``--stage1`` (``scripts/data/kge_trial_table.py``: ComplEx configurations of
the decoupled space trained on codex-s's 20% multi_rw subgraph at stage-1 sizes) and ``--stage2``
(``scripts/data/kge_stage2_table.py``: the same configurations trained on the full codex-s at the expanded
sizes batch {256, 512} x dim {200, 400}). A (configuration, sizes) pair that a replay needs and the record
lacks is trained on demand and appended to ``--stage2`` (``--no-record``: fail instead), so later
seeds reuse it; the count of such runs is printed.

One replay (seed s, variant v) runs the real searcher of ``search=kgtuner`` (``make_staged_searcher``
with ``stage2_start`` = v) on simulated time with ``--workers`` asynchronous workers:

* stage 1: RF+BORE restricted to the recorded pool (finite-candidate mode: each configuration at most once),
  ``--stage1-trials`` trials; a trial costs its recorded seconds and returns its recorded subgraph MRR;
* the switch: the top-10 stage-1 configurations expanded to 40 candidates (the real ``stage2_candidates``);
* stage 2: ``--stage2-trials`` trials (<= 40) chosen by the variant's stage-2 searcher; a trial costs its
  recorded full-graph seconds and returns its recorded full-graph validation MRR.

Stage 1 is identical for every variant of one seed (same searcher, same seed, same finishing order), so
the variants are paired. The searchers' own computing time is not charged to the simulated clock. Reported:
the best full-graph validation MRR after k finished stage-2 trials (the answer after k), per variant, the
mean paired difference to ``ordered`` with a 95% t-interval and the exact two-sided Wilcoxon signed-rank p.

Usage: python scripts/benchmarks/bench_stage2.py --seeds 20 --workers 8 --out docs/benchmarks/stage2_replay.parquet
       python scripts/benchmarks/bench_stage2.py --report docs/benchmarks/stage2_replay.parquet --baseline warm
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SIZES = {"batch_size": [256, 512], "dim": [200, 400]}
VARIANTS = {  # name -> (stage2_start, stage2_searcher overrides); fixed before the first replay
    "ordered": ("ordered", {"batch": "thompson"}),          # the stage 2 before issue 21
    "warm": ("warm", {"batch": "thompson"}),                # forest from stage 1's rows, Thompson draws when pending
    "warm_no_thompson": ("warm", {"batch": "none"}),        # the same, the whole forest for every suggestion
}


def _kge_stage2_table():
    """``scripts/data/kge_stage2_table.py`` (it trains the runs a replay needs and the record lacks)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("kge_stage2_table", REPO / "scripts" / "data" / "kge_stage2_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _key(cfg: dict) -> str:
    return json.dumps({k: v for k, v in sorted(cfg.items()) if k not in ("batch_size", "dim")})


class SimDriver:
    """The live driver of :mod:`kgtuner.tune.events` on simulated time."""

    def __init__(self):
        self.now = 0.0
        self.events = []

    def elapsed(self) -> float:
        return self.now

    def notify(self, event) -> None:
        self.events.append(event)

    def early_stop_of(self, trial_id):
        return None


class Record:
    """The two tables: stage-1 rows by configuration, full-graph rows by (configuration, batch, dim)."""

    def __init__(self, stage1: Path, stage2: Path, dataset: str, allow_record: bool):
        self.stage1 = [json.loads(x) for x in stage1.read_text().splitlines() if x.strip()]
        self.by_key = {_key(r["config"]): r for r in self.stage1}
        self.stage2_path, self.dataset, self.allow_record = stage2, dataset, allow_record
        self.full: dict[tuple, dict] = {}
        if stage2.exists():
            for line in stage2.read_text().splitlines():
                if line.strip():
                    r = json.loads(line)
                    self.full.setdefault((_key(r["config"]), r["config"]["batch_size"], r["config"]["dim"]), r)
        self.recorded_now = 0
        self.plan_only = False
        self.missing: set[tuple] = set()

    def full_row(self, cfg: dict) -> dict:
        k = (_key(cfg), cfg["batch_size"], cfg["dim"])
        if k not in self.full and self.plan_only:  # --plan: count what a replay would record, train nothing
            self.missing.add(k)
            return {"valid_mrr": 0.0, "seconds": 30.0}
        if k not in self.full:
            if not self.allow_record:
                raise SystemExit(f"missing full-graph record {k}; rerun without --no-record")
            kst = _kge_stage2_table()
            base = self.by_key[_key(cfg)]
            first = next(iter(self.full.values()), {})
            row = kst._train({"index": base["index"], "config": dict(cfg), "stage1_valid_mrr": base["valid_mrr"],
                              "dataset": self.dataset, "graph": first.get("graph"), "model": base["model"],
                              "space": base["space"], "max_steps": first.get("max_steps", 400),
                              "valid_every": first.get("valid_every", 200), "patience": first.get("patience", 4),
                              "train_seed": first.get("train_seed", 0), "top": "on-demand"})
            row["dataset"] = first.get("dataset", row["dataset"])
            with self.stage2_path.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            self.full[k] = row
            self.recorded_now += 1
            print(f"  recorded on demand: #{base['index']} b{cfg['batch_size']} d{cfg['dim']} "
                  f"valid_mrr={row['valid_mrr']} ({row['seconds']:.0f}s)", flush=True)
        return self.full[k]


def space_for(record: Record):
    import yaml

    from kgtuner.paths import CONF_DIR
    from kgtuner.search import load_space

    data = yaml.safe_load((Path(CONF_DIR) / "space" / "decoupled.yaml").read_text())
    data["stage2"] = {"expand": dict(SIZES), "exceptions": []}
    first = record.stage1[0]
    return load_space(data, model=first["model"], dataset=first["dataset"])


def replay(record: Record, variant: str, seed: int, workers: int, n1: int, n2: int, fast: bool) -> dict:
    from ray.tune.search import Searcher

    from kgtuner.search import RFBORESearcher
    from kgtuner.tune import events
    from kgtuner.tune.strategies.kgtuner import make_staged_searcher

    start, overrides = VARIANTS[variant]
    space = space_for(record)
    small = dict(n_trees=50, n_candidates=2000) if fast else {}
    search_cfg = {"name": "kgtuner", "stage2_searcher": {"initial": "ordered", **small, **overrides}}
    s = make_staged_searcher(search_cfg, space, slots=workers, seed=seed, stage1_end_s=math.inf, end_s=math.inf,
                             grace_s=math.inf, top_k=10, stage1_trials=n1, stage2_trials=n2,
                             warm_start=start == "warm")
    pool = [r["config"] for r in record.stage1]
    s.inner1 = RFBORESearcher(space, "valid_mrr", "max", seed=seed, candidates=pool, max_concurrent=workers, **small)
    driver = SimDriver()
    events.activate(driver)
    try:
        running: list[tuple[float, int, str, dict]] = []
        n, stage2_curve, best = 0, [], -1.0
        while True:
            while len(running) < workers:
                tid = f"t{n}"
                cfg = s.suggest(tid)
                if cfg is None or cfg == Searcher.FINISHED:
                    break
                hp = {k: v for k, v in cfg.items() if k not in ("stage", "trial_index")}
                row = record.by_key[_key(hp)] if cfg["stage"] == 1 else record.full_row(hp)
                heapq.heappush(running, (driver.now + float(row["seconds"]), n, tid, {**cfg, "_row": row}))
                n += 1
            if not running:
                break
            driver.now, _, tid, cfg = heapq.heappop(running)
            row = cfg.pop("_row")
            v = row["valid_mrr"]
            s.on_trial_complete(tid, None if v is None else {"valid_mrr": v, "trial_status": "ok"}, error=v is None)
            if cfg["stage"] == 2:
                best = max(best, v if v is not None else -1.0)
                stage2_curve.append((driver.now, best))
    finally:
        events.deactivate(driver)
    return {"variant": variant, "seed": seed, "curve": stage2_curve, "prior": s.prior_observations,
            "top": [_key(c) for c in s.top]}


def report(df, variants: list[str], ks: list[int], baseline: str, note: str = "") -> None:
    """Mean best MRR after k stage-2 trials per variant, and each variant minus ``baseline`` paired by seed
    (95% t-interval, exact Wilcoxon signed-rank p)."""
    from scipy import stats

    seeds = df.seed.nunique()
    print(f"\nbest full-graph validation MRR after k finished stage-2 trials (mean over {seeds} seeds"
          + (f"; {note}" if note else "") + f"); diff = variant - {baseline}, paired by seed:")
    print(f"{'k':>3} " + " ".join(f"{v:>18}" for v in variants) + "   diff [95% CI], Wilcoxon p")
    for k in ks:
        at = df[df.k == k].pivot(index="seed", columns="variant", values="best_valid_mrr")
        if at.empty:
            continue
        line = f"{k:>3} " + " ".join(f"{at[v].mean():>18.4f}" for v in variants)
        for v in variants:
            if v == baseline or baseline not in at:
                continue
            d = (at[v] - at[baseline]).dropna().to_numpy()
            half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
            p = stats.wilcoxon(d).pvalue if np.any(d != 0) else 1.0
            line += f"   {v}: {d.mean():+.4f} [{d.mean() - half:+.4f}, {d.mean() + half:+.4f}] p={p:.3g}"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage1", default=str(REPO / "docs/benchmarks/kge_tables/codex-s-sub.jsonl"))
    ap.add_argument("--stage2", default=str(REPO / "docs/benchmarks/kge_tables/codex-s-full.jsonl"))
    ap.add_argument("--dataset", default=str(REPO.parent / "shared/datasets/codex-s"))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--stage1-trials", type=int, default=48)
    ap.add_argument("--stage2-trials", type=int, default=24)
    ap.add_argument("--ks", type=int, nargs="+", default=[4, 8, 12, 16, 24])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    ap.add_argument("--fast", action="store_true", help="smaller forests (for the CI smoke test)")
    ap.add_argument("--no-record", action="store_true", help="fail on a missing full-graph record")
    ap.add_argument("--out", default=None, help="Parquet of every replay's stage-2 curve")
    ap.add_argument("--plan", action="store_true", help="only count the full-graph runs the replays would need")
    ap.add_argument("--baseline", default="ordered", help="the variant every other one is compared with")
    ap.add_argument("--report", default=None, help="print the comparison of a saved --out Parquet, replay nothing")
    args = ap.parse_args()
    if args.report:
        import pandas as pd

        report(pd.read_parquet(args.report), args.variants, args.ks, args.baseline)
        return

    import pandas as pd

    record = Record(Path(args.stage1), Path(args.stage2), args.dataset, not args.no_record)
    if args.plan:
        record.plan_only = True
        tops = set()
        for seed in range(args.seeds):
            for variant in args.variants:
                tops.update(replay(record, variant, seed, args.workers, args.stage1_trials, args.stage2_trials,
                                   args.fast)["top"])
        print(f"{len(tops)} distinct top-10 configurations over {args.seeds} seeds; {len(record.missing)} "
              "(configuration, sizes) pairs needed that the record lacks")
        return
    print(f"record: {len(record.stage1)} stage-1 rows, {len(record.full)} full-graph rows; {args.workers} workers, "
          f"{args.stage1_trials} stage-1 + {args.stage2_trials} stage-2 trials, seeds 0..{args.seeds - 1}")
    rows = []
    for seed in range(args.seeds):
        for variant in args.variants:
            out = replay(record, variant, seed, args.workers, args.stage1_trials, args.stage2_trials, args.fast)
            for k, (t, b) in enumerate(out["curve"], 1):
                rows.append({"seed": seed, "variant": variant, "k": k, "sim_s": t, "best_valid_mrr": b,
                             "prior_observations": out["prior"]})
        print(f"seed {seed} done", flush=True)
    df = pd.DataFrame(rows)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        df.to_parquet(args.out, index=False)
    best_possible = max((r["valid_mrr"] or 0) for r in record.full.values())
    report(df, args.variants, args.ks, args.baseline, f"best in the whole record {best_possible:.4f}")
    print(f"\nfull-graph runs recorded on demand by this replay: {record.recorded_now}")


if __name__ == "__main__":
    main()
