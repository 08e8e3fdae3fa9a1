"""Equal learning: one configuration trained the old way and the new way, validation MRR side by side.

``old`` is the first engine's step (``kgtuner.kge.reference_step.ReferenceTrainer``: autograd through
``nn.Embedding(sparse=True)``, torch's ``SparseAdam``); ``new`` is ``Trainer`` as it trains today (row
step, row-sparse Adam). Both train the same configuration with the same seeds for the same number of
steps (no early stopping, no learning-rate decay, so the schedules cannot drift apart), validating
(filtered MRR) every ``--valid-every`` steps. The seeds give the yardstick: the old-vs-new difference
at a seed should be well inside the seed-to-seed spread of either way. Also prints each run's training
throughput (triples per second of training, validation excluded).

    python scripts/perf/bench_learning.py                            # Kinships and WN18RR, seeds 0 and 1
    python scripts/perf/bench_learning.py --datasets kinships --seeds 0 1 2 --steps 2000
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from kgtuner.data import FilterIndex, load_dataset
from kgtuner.kge import Trainer, TrainConfig
from kgtuner.kge.reference_step import ReferenceTrainer

REPO = Path(__file__).resolve().parents[2]
#: Steps and validation interval per dataset (Kinships: ~9 steps per epoch, WN18RR: ~85).
PLAN = {"kinships": (1500, 250), "wn18rr": (4000, 500)}
CONFIG = {"model": "complex", "dim": 200, "batch_size": 1024, "negatives": 128, "optimizer": "Adam", "lr": 3e-3,
          "loss": "BCE_adv", "regularizer": "DURA", "reg_weight": 1e-3, "initializer": "xavier_uniform",
          "max_epochs": None, "patience": 10 ** 6, "lr_patience": 0}


def run(cls, kg, filt, cfg: dict) -> dict:
    trainer = cls(TrainConfig.from_dict(cfg), kg, filter_index=filt, device="cpu")
    res = trainer.fit()
    return {"curve": [(h["step"], h["valid_mrr"]) for h in res.history if "valid_mrr" in h],
            "best_valid_mrr": res.valid["mrr"], "test_mrr": res.test["mrr"] if res.test else None,
            "triples_per_second": res.triples_per_second, "status": res.status}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["kinships", "wn18rr"])
    ap.add_argument("--root", default=str(REPO.parent / "shared" / "datasets"))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--steps", type=int, default=None, help="override the per-dataset number of steps")
    ap.add_argument("--valid-every", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {}
    for name in args.datasets:
        kg = load_dataset(str(Path(args.root) / name))
        filt = FilterIndex.from_graph(kg)
        steps, every = PLAN.get(name, (2000, 250))
        steps, every = args.steps or steps, args.valid_every or every
        runs = {}
        for seed in args.seeds:
            cfg = {**CONFIG, "max_steps": steps, "valid_every": every, "seed": seed}
            for way, cls in (("old", ReferenceTrainer), ("new", Trainer)):
                runs[f"{way}/{seed}"] = run(cls, kg, filt, cfg)
                r = runs[f"{way}/{seed}"]
                print(f"{name} {way} seed {seed}: best valid MRR {r['best_valid_mrr']:.4f}, test MRR "
                      f"{r['test_mrr']:.4f}, {r['triples_per_second']:,.0f} triples/s", file=sys.stderr, flush=True)
        results[name] = {"steps": steps, "valid_every": every, "runs": runs}
        print(f"\n### {name}: {steps} steps, config {json.dumps(CONFIG)}\n")
        cols = [f"{way} s{seed}" for seed in args.seeds for way in ("old", "new")]
        print("| step | " + " | ".join(cols) + " |")
        print("|---:|" + "---:|" * len(cols))
        for i, (step, _) in enumerate(runs[f"old/{args.seeds[0]}"]["curve"]):
            vals = [runs[f"{way}/{seed}"]["curve"][i][1] for seed in args.seeds for way in ("old", "new")]
            print(f"| {step} | " + " | ".join(f"{v:.4f}" for v in vals) + " |")
        for key, label in (("best_valid_mrr", "best valid"), ("test_mrr", "test (best valid)"),
                           ("triples_per_second", "train triples/s (sequential runs)")):
            vals = [runs[f"{way}/{seed}"][key] for seed in args.seeds for way in ("old", "new")]
            fmt = "{:,.0f}" if key == "triples_per_second" else "{:.4f}"
            print(f"| {label} | " + " | ".join(fmt.format(v) for v in vals) + " |")
        same_seed = [abs(runs[f"old/{s}"]["best_valid_mrr"] - runs[f"new/{s}"]["best_valid_mrr"]) for s in args.seeds]
        across = [abs(runs[f"{w}/{a}"]["best_valid_mrr"] - runs[f"{w}/{b}"]["best_valid_mrr"])
                  for w in ("old", "new") for i, a in enumerate(args.seeds) for b in args.seeds[i + 1:]]
        summary = {"max_old_new_gap_same_seed": max(same_seed),
                   "max_seed_to_seed_gap": max(across) if across else None,
                   "new_over_old_train_speed": float(np.median(
                       [runs[f"new/{s}"]["triples_per_second"] / runs[f"old/{s}"]["triples_per_second"]
                        for s in args.seeds]))}
        results[name]["summary"] = summary
        print(f"\nbest valid MRR, old vs new at the same seed: max gap {summary['max_old_new_gap_same_seed']:.2g}; "
              f"seed to seed (same way): max gap "
              + (f"{summary['max_seed_to_seed_gap']:.4f}" if across else "n/a (one seed)")
              + f"; training speed new/old: {summary['new_over_old_train_speed']:.2f}x (runs one after the other, "
              "not interleaved: scripts/perf/bench_engine_speed.py times them side by side)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
