"""Training throughput of the kgtuner engine against a minimal torch loop, in one process.

Three (four with ``--compile``) ways to train the same configuration, timed over the same number of
steps in alternating rounds (``--rounds``, short so that the ways of a round see the same machine
load; the order rotates from round to round), after a warm-up:

* ``anchor``: the plain 40-line torch loop (ComplEx, batch-shared uniform negatives for heads and
  tails, softplus loss, ``nn.Embedding(sparse=True)`` + ``torch.optim.SparseAdam``);
* ``old``: the first engine's step (``kgtuner.kge.reference_step.ReferenceTrainer``: autograd through
  ``nn.Embedding``, torch's ``SparseAdam``), i.e. what the trainer did before the row step;
* ``new``: ``Trainer`` as it trains today (the row step, row-sparse Adam), validation off;
* ``compiled``: ``Trainer`` with ``compile: true`` (compilation time reported separately).

Each round gives each way's triples/s and its ratio to the anchor of the same round; the medians over
rounds are printed (the machine may be shared: read the ratios), also per CPU second of the process
(``median_cpu_time_ratio_to_anchor``: less sensitive to other load; with several threads it counts
their spinning too). The "GEMM floor" is the step's
matrix-product FLOPs (3 products of [2B, d] x [d, m]) at the rate of a 2048^3 fp32 product measured
in the same process: the throughput if nothing but those products took time. ``--eval`` times the
filtered ranking of the validation split against its own GEMM floor.

    python scripts/perf/bench_engine_speed.py                       # WN18RR from ../shared/datasets
    python scripts/perf/bench_engine_speed.py --threads 1 --compile --eval   # on a busy machine: 1 thread
    python scripts/perf/bench_engine_speed.py --data demo --steps 100
    python scripts/perf/bench_engine_speed.py --synthetic biokg --device cuda --dim 2000 --negatives 512 --compile
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from kgtuner.data import KnowledgeGraph, load_dataset
from kgtuner.kge import Trainer, TrainConfig
from kgtuner.kge.reference_step import ReferenceTrainer

REPO = Path(__file__).resolve().parents[2]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class AnchorLoop:
    """Minimal ComplEx loop with batch-shared negatives and SparseAdam (state kept across rounds)."""

    def __init__(self, train: np.ndarray, n_ent: int, n_rel: int, dim: int, batch: int, neg: int, device: str,
                 lr: float = 1e-3):
        torch.manual_seed(0)
        self.ent = torch.nn.Embedding(n_ent, dim, sparse=True).to(device)
        self.rel = torch.nn.Embedding(n_rel, dim, sparse=True).to(device)
        torch.nn.init.uniform_(self.ent.weight, -0.01, 0.01)
        torch.nn.init.uniform_(self.rel.weight, -0.01, 0.01)
        self.opt = torch.optim.SparseAdam(list(self.ent.parameters()) + list(self.rel.parameters()), lr=lr)
        self.data = torch.as_tensor(train, device=device)
        self.n_ent, self.batch, self.neg, self.device = n_ent, batch, neg, device

    def run(self, steps: int) -> tuple[float, float]:
        """Train ``steps`` steps; returns triples per wall-clock second and per CPU second."""
        ent, rel, opt, device = self.ent, self.rel, self.opt, self.device
        n = self.data.shape[0]
        _sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            b = self.data[torch.randint(n, (self.batch,), device=device)]
            h, r, t = ent(b[:, 0]), rel(b[:, 1]), ent(b[:, 2])
            e_neg = ent(torch.randint(self.n_ent, (self.neg,), device=device))
            a, bb = h.chunk(2, -1)
            c, d = r.chunk(2, -1)
            x, y = t.chunk(2, -1)
            q_t = torch.cat([a * c - bb * d, a * d + bb * c], -1)
            q_h = torch.cat([c * x + d * y, c * y - d * x], -1)
            pos = (q_t * t).sum(-1)
            loss = (F.softplus(-pos).mean() + 0.5 * (F.softplus(q_t @ e_neg.t()).mean(1)
                                                     + F.softplus(q_h @ e_neg.t()).mean(1)).mean())
            opt.zero_grad()
            loss.backward()
            opt.step()
        _sync(device)
        return steps * self.batch / (time.perf_counter() - t0), steps * self.batch / (time.process_time() - c0)


class EngineRun:
    """A trainer (``cls``) on the graph's training triples, validation off, continued round by round."""

    def __init__(self, cls, kg: KnowledgeGraph, cfg: dict, device: str):
        bare = KnowledgeGraph(kg.name, kg.entities, kg.relations, kg.train, kg.train[:0], kg.train[:0],
                              entity_types=kg.entity_types)
        t0 = time.perf_counter()
        self.trainer = cls(TrainConfig.from_dict({**cfg, "max_steps": 5, "max_epochs": None}), bare, device=device)
        # warm-up (and compilation): past the first epoch's shorter last batch when that comes soon
        self.trainer.cfg.max_steps = min(self.trainer.steps_per_epoch + 1, 200)
        self.trainer.fit()
        _sync(device)
        self.setup_seconds = time.perf_counter() - t0

    def run(self, steps: int) -> tuple[float, float]:
        tr = self.trainer
        tr.cfg.max_steps = tr.step + steps
        seen = tr.examples_seen
        _sync(str(tr.device))
        t0, c0 = time.perf_counter(), time.process_time()
        tr.fit()
        _sync(str(tr.device))
        n = tr.examples_seen - seen
        return n / (time.perf_counter() - t0), n / (time.process_time() - c0)


def gemm_rate(device: str, n: int = 2048) -> float:
    """fp32 matrix-product rate (FLOP/s) of an n^3 product, best of 3."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    best = float("inf")
    for _ in range(3):
        _sync(device)
        t = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def eval_bench(trainer: Trainer, kg: KnowledgeGraph, rate: float, reps: int = 3) -> dict:
    """Filtered ranking of the validation split (head and tail queries against all entities) with the
    trained model: seconds (median of ``reps``) against its GEMM floor (the score products' FLOPs at the
    measured GEMM rate); the anchor is the same ranking without the reused score buffer."""
    from kgtuner.data import FilterIndex
    from kgtuner.kge import evaluation

    filt = FilterIndex.from_graph(kg)
    model = trainer.model
    triples = kg.valid
    times: dict[str, list[float]] = {"eval": [], "eval_without_buffer": []}
    plain = evaluation._plain_product
    for _ in range(reps):
        for name in times:
            evaluation._plain_product = plain if name == "eval" else (lambda m: False)
            try:
                t0 = time.perf_counter()
                evaluation.evaluate_filtered(model, triples, filt)
                _sync(str(trainer.device))
                times[name].append(time.perf_counter() - t0)
            finally:
                evaluation._plain_product = plain
    floor = 2 * (2 * len(triples)) * kg.num_entities * model.dim / rate
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {"eval_queries": 2 * len(triples), "eval_seconds": round(med["eval"], 3),
            "eval_seconds_without_buffer": round(med["eval_without_buffer"], 3),
            "eval_gemm_floor_seconds": round(floor, 3), "eval_over_floor": round(med["eval"] / floor, 2)}


def synthetic_biokg(scale: float = 1.0, seed: int = 0) -> KnowledgeGraph:
    """A graph with ogbl-biokg's shape: 93,773 entities in 5 types, 51 relations, 4.76 M triples."""
    rng = np.random.default_rng(seed)
    n_ent, n_rel, n_tr = 93_773, 51, int(4_762_678 * scale)
    types = np.sort(rng.integers(0, 5, n_ent))
    train = np.stack([rng.integers(0, n_ent, n_tr), rng.integers(0, n_rel, n_tr), rng.integers(0, n_ent, n_tr)], 1)
    return KnowledgeGraph("synthetic-biokg", [f"e{i}" for i in range(n_ent)], [f"r{i}" for i in range(n_rel)],
                          train, train[:0], train[:0], entity_types=types, entity_type_names=list("ABCDE"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "datasets" / "wn18rr"))
    ap.add_argument("--synthetic", choices=["biokg"], default=None)
    ap.add_argument("--model", default="complex")
    ap.add_argument("--dim", type=int, default=200)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--negatives", type=int, default=128)
    ap.add_argument("--loss", default="BCE_mean", help="the anchor's loss is BCE_mean (its ratio means most with it)")
    ap.add_argument("--regularizer", default="None", help="the anchor has none")
    ap.add_argument("--steps", type=int, default=30, help="steps per way and round")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--compile", action="store_true", help="also time compile: true")
    ap.add_argument("--no-anchor", action="store_true")
    ap.add_argument("--no-old", action="store_true", help="skip the first engine's step")
    ap.add_argument("--eval", action="store_true", help="also time filtered ranking of the validation split")
    ap.add_argument("--untyped", action="store_true", help="synthetic graph: plain uniform negatives, like the anchor")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    kg = synthetic_biokg() if args.synthetic else load_dataset(args.data)
    cfg = {"model": args.model, "dim": args.dim, "batch_size": args.batch, "negatives": args.negatives,
           "loss": args.loss, "regularizer": args.regularizer, "optimizer": "Adam", "lr": 1e-3, "initializer": "uniform",
           "amp": args.amp, "type_constrained": args.synthetic is not None and not args.untyped,
           "valid_every": 10 ** 9}
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    ways: dict[str, object] = {}
    setup: dict[str, float] = {}
    if not args.no_anchor:
        ways["anchor"] = AnchorLoop(kg.train, kg.num_entities, kg.num_relations, args.dim, args.batch,
                                    args.negatives, args.device)
        ways["anchor"].run(5)
    if not args.no_old:
        ways["old"] = EngineRun(ReferenceTrainer, kg, cfg, args.device)
    ways["new"] = EngineRun(Trainer, kg, cfg, args.device)
    if args.compile:
        ways["compiled"] = EngineRun(Trainer, kg, {**cfg, "compile": True}, args.device)
    for name, way in ways.items():
        if isinstance(way, EngineRun):
            setup[name] = round(way.setup_seconds, 1)
    tps: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    for rnd in range(args.rounds):
        for name in names[rnd % len(names):] + names[:rnd % len(names)]:  # rotate who goes first
            wall, per_cpu = ways[name].run(args.steps)
            tps[name].append(wall)
            cpu[name].append(per_cpu)
        print(f"round {rnd + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in tps.items()) + " triples/s",
              file=sys.stderr, flush=True)
    flops = 3 * 2 * (2 * args.batch) * args.dim * args.negatives  # [2B,d]x[d,m] forward, two backward
    rate = gemm_rate(args.device)
    out = {"dataset": kg.name, "config": cfg, "device": args.device, "threads": torch.get_num_threads(),
           "steps_per_round": args.steps, "rounds": args.rounds,
           "median_triples_per_s": {k: round(float(np.median(v))) for k, v in tps.items()},
           "gemm_GFLOPs": round(rate / 1e9, 1),
           "gemm_floor_triples_per_s": round(args.batch / (flops / rate)),
           "setup_seconds": setup}

    def ratios(table: dict[str, list[float]], base: str) -> dict[str, float]:
        ref = np.asarray(table[base])
        return {k: round(float(np.median(np.asarray(v) / ref)), 3) for k, v in table.items() if k != base}

    if "anchor" in tps:
        out["median_ratio_to_anchor"] = ratios(tps, "anchor")
        out["ratio_to_anchor_per_round"] = {k: [round(float(x), 3) for x in np.asarray(v) / np.asarray(tps["anchor"])]
                                            for k, v in tps.items() if k != "anchor"}
        # per CPU second (all threads): what the work costs, whatever else the machine runs
        out["median_cpu_time_ratio_to_anchor"] = ratios(cpu, "anchor")
    if "old" in tps:
        out["median_ratio_new_over_old"] = ratios(tps, "old")["new"]
    if args.eval and len(kg.valid):
        out.update(eval_bench(ways["new"].trainer, kg, rate))
    if args.device.startswith("cuda"):
        out["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        out["gpu"] = torch.cuda.get_device_name()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
