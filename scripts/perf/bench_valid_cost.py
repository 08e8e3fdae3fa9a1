"""Stage-1 validation cost on a graph of ogbl-wikikg2's size: one validation against 2,500 training steps.

KGTuner's stage 1 trains on a subgraph (``search.subgraph_ratio`` 0.2, ``multi_rw``) and validates every
``trial.stage1.valid_every`` (2,500) steps by filtered ranking of the subgraph's valid split (10 % of its
triples) against every subgraph entity. On wikikg2 that is ~500k entities per query. This script builds a
synthetic graph of wikikg2's shape (2.5M entities, ~16M training triples, 535 relations; head and tail
popularity power-law skewed, so random walks meet hubs as on the real graph), samples the 20 % ``multi_rw``
subgraph with ``kgtuner.data.sample_subgraph``, and times, at stage-1 sizes (ComplEx, dim 100, batch 128,
128 negatives) on one torch thread:

* ``--steps`` training steps (``Trainer.fit``'s step time; 2,500 = one ``valid_every``);
* one validation capped at each ``--cap`` (``trial.stage1.max_valid_triples``: 5000 by default);
* one uncapped validation: every valid triple, extrapolated linearly from a timed sample of ``--sample``
  triples unless ``--full`` (an uncapped validation of a wikikg2-size subgraph takes over an hour on one thread).

Times are this process's CPU seconds (one thread: the compute itself, less sensitive to other load on a
shared machine, whose load average is printed), wall seconds beside them.

    python scripts/perf/bench_valid_cost.py                      # wikikg2's size (about 6 min, ~3 GB)
    python scripts/perf/bench_valid_cost.py --scale 0.1 --steps 500   # a tenth of it, quick
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from kgtuner.data import FilterIndex, KnowledgeGraph, sample_subgraph
from kgtuner.kge import TrainConfig, Trainer

WIKIKG2 = {"entities": 2_500_604, "relations": 535, "train": 16_109_182}


def synthetic_graph(entities: int, relations: int, triples: int, skew: float, seed: int) -> KnowledgeGraph:
    """Heads and tails drawn with probability ~ (popularity rank)^-skew, relations uniformly; no valid/test."""
    rng = np.random.default_rng(seed)
    weight = 1.0 / np.arange(1, entities + 1, dtype=np.float64) ** skew
    cdf = np.cumsum(weight[rng.permutation(entities)])
    cdf /= cdf[-1]

    def draw(n: int) -> np.ndarray:
        return np.minimum(np.searchsorted(cdf, rng.random(n)), entities - 1).astype(np.int64)

    train = np.stack([draw(triples), rng.integers(0, relations, triples), draw(triples)], axis=1)
    empty = np.empty((0, 3), dtype=np.int64)
    return KnowledgeGraph("synthetic-wikikg2", np.char.add("e", np.arange(entities).astype(str)),
                          np.char.add("r", np.arange(relations).astype(str)), train, empty, empty)


def timed(fn):
    """``fn()``, its wall seconds."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def cpu_timed(fn):
    """``fn()``, its wall seconds and this process's CPU seconds."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="share of wikikg2's entities and triples")
    ap.add_argument("--skew", type=float, default=0.8, help="power-law exponent of entity popularity")
    ap.add_argument("--ratio", type=float, default=0.2, help="search.subgraph_ratio")
    ap.add_argument("--sampler", default="multi_rw")
    ap.add_argument("--cap", type=int, nargs="+", default=[5000, 1000], help="trial.stage1.max_valid_triples values")
    ap.add_argument("--sample", type=int, default=20000, help="valid triples timed to extrapolate the uncapped cost")
    ap.add_argument("--full", action="store_true", help="time the uncapped validation itself")
    ap.add_argument("--steps", type=int, default=2500, help="training steps timed (one valid_every)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n_ent, n_tr = int(WIKIKG2["entities"] * args.scale), int(WIKIKG2["train"] * args.scale)
    print(f"bench_valid_cost: scale {args.scale:g}, skew {args.skew:g}, {args.threads} torch thread(s), "
          f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    kg, t = timed(lambda: synthetic_graph(n_ent, WIKIKG2["relations"], n_tr, args.skew, args.seed))
    print(f"full graph: {kg.num_entities} entities, {kg.num_relations} relations, {len(kg.train)} train triples "
          f"(built in {t:.1f}s)")
    sub, t = timed(lambda: sample_subgraph(kg, ratio=args.ratio, seed=args.seed, sampler=args.sampler))
    g = sub.graph
    del kg
    print(f"subgraph ({args.sampler}, ratio {args.ratio:g}): {g.num_entities} entities, {g.num_relations} relations, "
          f"{len(g.train)} train / {len(g.valid)} valid triples (sampled in {t:.1f}s)")
    fi, t = timed(lambda: FilterIndex.from_graph(g))
    print(f"filter index of the subgraph: {t:.1f}s (once per worker)")

    base = {"model": "complex", "dim": 100, "batch_size": 128, "negatives": 128, "loss": "BCE_adv",
            "max_epochs": None, "device": "cpu", "seed": args.seed}
    # training: a validation every args.steps steps costs nothing here (one sampled valid triple)
    trainer = Trainer(TrainConfig.from_dict({**base, "max_steps": args.steps, "valid_every": args.steps,
                                             "max_valid_triples": 1}), g, filter_index=fi)
    result, wall, train_s = cpu_timed(trainer.fit)
    print(f"training: {result.steps} steps in {train_s:.1f} CPU s ({wall:.1f} wall s; "
          f"{1e3 * train_s / max(1, result.steps):.2f} CPU ms/step; ComplEx dim 100, batch 128, 128 negatives)")

    def validation(cap: int | None) -> tuple[int, float, float]:
        tr = Trainer(TrainConfig.from_dict({**base, "max_steps": 1, "max_valid_triples": cap}), g, filter_index=fi)
        tr.model.load_state_dict(trainer.model.state_dict())
        rows = tr.valid_rows()
        n = len(g.valid) if rows is None else len(rows)
        _, wall, sec = cpu_timed(lambda: tr.evaluate("valid"))
        return n, sec, wall

    capped = {}
    for cap in args.cap:
        n_cap, t_cap, wall = validation(cap)
        capped[cap] = t_cap
        print(f"validation capped at {cap} triples: {n_cap} triples ({2 * n_cap} queries) in {t_cap:.1f} CPU s "
              f"({wall:.1f} wall s) = {t_cap / train_s:.2f} x the {result.steps} training steps")
    if args.full or len(g.valid) <= args.sample:
        n_all, t_all, wall = validation(None)
        how = f"timed, {wall:.1f} wall s"
    else:
        n_s, t_s, wall = validation(args.sample)
        n_all, t_all = len(g.valid), t_s * len(g.valid) / n_s
        how = f"extrapolated from {n_s} triples timed in {t_s:.1f} CPU s, {wall:.1f} wall s"
    print(f"validation uncapped: {n_all} triples ({2 * n_all} queries) {t_all:.1f} CPU s ({how}) "
          f"= {t_all / train_s:.2f} x the {result.steps} training steps")
    shares = ", ".join(f"{t / (t + train_s):.0%} capped at {cap}" for cap, t in capped.items())
    print(f"share of a stage-1 trial's time spent validating (every {result.steps} steps): {shares}, "
          f"{t_all / (t_all + train_s):.0%} uncapped")


if __name__ == "__main__":
    main()
