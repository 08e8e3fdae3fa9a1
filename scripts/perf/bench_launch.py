"""Benchmark of the search service's overhead: how busy the GPU slots are during a demo search.

Runs the two-stage KGTuner search on the embedded demo with ``cluster.num_gpus=8`` logical GPUs
(in this process, so the driver's memory is measurable), then reads ``trials.parquet`` and prints:

* the share of GPU-slot time (slots x search wall time) spent inside ``Trainer.fit`` (training
  steps + validations), inside pure training steps, in per-trial set-up, and idle;
* the per-trial overhead (slot time not in ``Trainer.fit``, per trial) and its parts: launch
  (Tune start -> trainable start: actor start-up, first imports), set-up (graph view, filter index,
  model), and idle slot time (scheduling gaps, the stage-switch drain, the end-of-budget drain);
* the driver's peak RSS against the size of the graph arrays it put once into the object store.

Usage::

    python scripts/perf/bench_launch.py [--seconds 120] [--gpus 8] [--out DIR] [extra Hydra overrides...]

Timings on a shared machine are noisy; the figures are ratios within one run.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120.0, help="search budget B in seconds")
    ap.add_argument("--gpus", type=int, default=8, help="logical GPUs of the local Ray")
    ap.add_argument("--out", default=None, help="run directory (default: a temporary one)")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. trial.stage1.max_steps=400")
    args = ap.parse_args(argv)

    import pandas as pd
    from hydra import compose, initialize_config_dir

    from kgtuner.paths import CONF_DIR
    from kgtuner.tune.coordinator import Coordinator
    from kgtuner.tune.settings import ExperimentSettings

    run_dir = Path(args.out or tempfile.mkdtemp(prefix="kgtuner-bench-"))
    overrides = [f"budget.seconds={args.seconds}", f"cluster.num_gpus={args.gpus}", "cluster.include_dashboard=false",
                 *args.overrides]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    settings = ExperimentSettings.from_config(cfg)
    coordinator = Coordinator(settings, run_dir, verbose=0)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    summary = coordinator.run()
    wall = time.perf_counter() - t0
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    graphs = list(coordinator.strategy.graphs().values())  # every graph the search trained on
    full = coordinator.strategy.full
    sub = next((g for g in graphs if g is not full), full)  # KGTuner: its stage-1 subgraph
    graph_mb = sum(a.nbytes for a in full.to_arrays().values()) / 2**20
    sub_mb = sum(a.nbytes for a in sub.to_arrays().values()) / 2**20

    df = pd.read_parquet(run_dir / "trials.parquet")
    slots = summary["cluster"]["slots"]
    search_s = float(summary["budget"]["used_s"])
    slot_time = slots * search_s
    n = len(df)
    fit = df["fit_s"].fillna(0).sum()
    train = df["train_s"].fillna(0).sum()
    setup = df["setup_s"].fillna(0).sum()
    launch = df["launch_s"].fillna(0).sum()
    occupied = (df["end_s"] - df["start_s"]).clip(lower=0).sum()
    idle = max(0.0, slot_time - occupied)
    other_in_trial = max(0.0, occupied - fit - setup - launch)
    first = df.sort_values("start_s").groupby("gpu").head(1)  # first trial of each slot: actor start-up

    def pct(x):
        return f"{100 * x / slot_time:5.1f}%"

    print(f"\n=== bench_launch: KGTuner on the demo, {slots} slots ({summary['cluster']['resources_per_trial']} each), "
          f"B={args.seconds:g}s ===")
    print(f"trials: {n} ({summary['trials_per_stage']}); search wall {search_s:.1f}s "
          f"(whole run incl. Ray start {wall:.1f}s); slot time {slot_time:.1f} slot-s")
    print(f"{'share of GPU-slot time':38s} {'slot-s':>8s} {'share':>7s}")
    for name, value in [("inside Trainer.fit (busy)", fit), ("  of which training steps", train),
                        ("trial set-up (graph, model)", setup), ("launch (Tune -> trainable start)", launch),
                        ("other in-trial (reports, checkpoints)", other_in_trial), ("idle (no trial on the slot)", idle)]:
        print(f"{name:38s} {value:8.1f} {pct(value):>7s}")
    overhead = (slot_time - fit) / max(n, 1)
    print(f"per-trial overhead (slot time not in Trainer.fit / trials): {overhead:.2f}s; mean launch "
          f"{df['launch_s'].mean():.2f}s (first trial per slot {first['launch_s'].mean():.2f}s, later "
          f"{df.drop(first.index)['launch_s'].mean():.2f}s), mean set-up {df['setup_s'].mean():.2f}s, "
          f"idle per trial {idle / max(n, 1):.2f}s")
    parts = {"launch": launch, "set-up": setup, "idle": idle, "in-trial other": other_in_trial}
    print(f"dominant overhead: {max(parts, key=parts.get)} ({', '.join(f'{k} {v:.1f}s' for k, v in parts.items())})")
    print(f"driver peak RSS {rss_peak:.0f} MiB (at start {rss0:.0f} MiB); graph arrays put once: full {graph_mb:.2f} MiB, "
          f"subgraph {sub_mb:.3f} MiB")
    # Steady state: from the moment every slot has its first trial training (actor start-up and the
    # first imports of torch/kgtuner done) to the end of the search.
    fit_start = df["start_s"] + df["launch_s"].fillna(0) + df["setup_s"].fillna(0)
    fit_end = fit_start + df["fit_s"].fillna(0)
    warm = (fit_start.groupby(df["gpu"]).min()).max() if df["gpu"].nunique() == slots else float("nan")
    if warm == warm and warm < search_s:
        busy_warm = (fit_end.clip(upper=search_s) - fit_start.clip(lower=warm)).clip(lower=0).sum()
        print(f"start-up: the last slot began training at t={warm:.1f}s; busy share after that: "
              f"{100 * busy_warm / (slots * (search_s - warm)):.1f}%")
    print(f"busy share (Trainer.fit / slot time): {100 * fit / slot_time:.1f}% (target >= 90%)")
    print(f"run directory: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
