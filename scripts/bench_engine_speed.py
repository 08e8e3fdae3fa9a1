"""Training throughput of the kgtuner engine against a minimal torch anchor loop, in one process.

The anchor is the plain loop the issue quotes (~88k triples/s on WN18RR on 2 cores): ComplEx,
batch-shared uniform negatives for heads and tails, softplus (BCE_mean) loss, SparseAdam. The
engine runs the same configuration through ``Trainer`` (validation off). Both are timed over the
same number of steps after a warm-up, alternating ``--rounds`` times, and the ratio
engine / anchor is printed (timings on a shared machine are noisy: read the ratio).

    python scripts/bench_engine_speed.py                       # WN18RR from ../shared/datasets
    python scripts/bench_engine_speed.py --data demo --steps 200
    python scripts/bench_engine_speed.py --synthetic biokg --device cuda --dim 2000 --negatives 512
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

REPO = Path(__file__).resolve().parents[1]


def anchor_loop(train: np.ndarray, n_ent: int, n_rel: int, dim: int, batch: int, neg: int, steps: int,
                device: str, lr: float = 1e-3) -> float:
    """Minimal ComplEx loop with batch-shared negatives and SparseAdam; returns triples/s."""
    torch.manual_seed(0)
    ent = torch.nn.Embedding(n_ent, dim, sparse=True).to(device)
    rel = torch.nn.Embedding(n_rel, dim, sparse=True).to(device)
    torch.nn.init.uniform_(ent.weight, -0.01, 0.01)
    torch.nn.init.uniform_(rel.weight, -0.01, 0.01)
    opt = torch.optim.SparseAdam(list(ent.parameters()) + list(rel.parameters()), lr=lr)
    data = torch.as_tensor(train, device=device)
    n = data.shape[0]

    def run(k):
        for i in range(k):
            b = data[torch.randint(n, (batch,), device=device)]
            h, r, t = ent(b[:, 0]), rel(b[:, 1]), ent(b[:, 2])
            e_neg = ent(torch.randint(n_ent, (neg,), device=device))
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
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    run(5)
    t0 = time.perf_counter()
    run(steps)
    return steps * batch / (time.perf_counter() - t0)


def engine_run(kg: KnowledgeGraph, cfg: dict, steps: int, device: str) -> tuple[float, Trainer]:
    """Trainer throughput (its own train_seconds) for ``steps`` steps after a short warm-up."""
    bare = KnowledgeGraph(kg.name, kg.entities, kg.relations, kg.train, kg.train[:0], kg.train[:0],
                          entity_types=kg.entity_types)
    trainer = Trainer(TrainConfig.from_dict({**cfg, "max_steps": 5, "max_epochs": None}), bare, device=device)
    trainer.fit()
    trainer.cfg.max_steps = 5 + steps
    seen, secs = trainer.examples_seen, trainer.train_seconds
    trainer.fit()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (trainer.examples_seen - seen) / (trainer.train_seconds - secs), trainer


def adam_probe(trainer: Trainer, steps: int = 30) -> dict:
    """Time the optimizer step alone (CUDA events) and the bytes it must move: achieved bandwidth."""
    batch = trainer.examples[:trainer.cfg.batch_size]
    times, nbytes = [], []
    for _ in range(steps):
        for opt in trainer.optimizers:
            opt.zero_grad(set_to_none=True)
        loss = trainer.sampler.loss(trainer.model, batch, trainer.loss_fn, trainer.generator)
        loss.backward()
        moved = 0
        for p in trainer.model.parameters():
            if p.grad is None:
                continue
            rows = p.grad.coalesce()._nnz() if p.grad.is_sparse else p.shape[0]
            row_bytes = p[0].numel() * p.element_size()
            moved += rows * row_bytes * 7  # read param, grad, m, v; write param, m, v
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for opt in trainer.optimizers:
            opt.step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
        nbytes.append(moved)
    t = float(np.median(times[5:]))
    return {"adam_step_ms": round(t * 1e3, 3), "adam_bytes_per_step": int(np.median(nbytes)),
            "adam_achieved_GBps": round(np.median(nbytes) / t / 1e9, 1)}


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
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-anchor", action="store_true")
    ap.add_argument("--untyped", action="store_true", help="synthetic graph: plain uniform negatives, like the anchor")
    ap.add_argument("--peak-bandwidth-gbps", type=float, default=None,
                    help="card memory bandwidth for the Adam fraction (default: H200 4800, else H100 SXM 3350)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    kg = synthetic_biokg() if args.synthetic else load_dataset(args.data)
    cfg = {"model": args.model, "dim": args.dim, "batch_size": args.batch, "negatives": args.negatives,
           "loss": "BCE_mean", "regularizer": "None", "optimizer": "Adam", "lr": 1e-3, "initializer": "uniform",
           "amp": args.amp, "type_constrained": args.synthetic is not None and not args.untyped}
    eng, anc = [], []
    trainer = None
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    for _ in range(args.rounds):
        if not args.no_anchor:
            anc.append(anchor_loop(kg.train, kg.num_entities, kg.num_relations, args.dim, args.batch,
                                   args.negatives, args.steps, args.device))
        tps, trainer = engine_run(kg, cfg, args.steps, args.device)
        eng.append(tps)
        print(f"round {len(eng)}: engine {tps:.0f} triples/s" + (f", anchor {anc[-1]:.0f}" if anc else ""),
              file=sys.stderr, flush=True)
    out = {"dataset": kg.name, "config": cfg, "device": args.device, "threads": torch.get_num_threads(),
           "engine_triples_per_s": round(max(eng)), "anchor_triples_per_s": round(max(anc)) if anc else None,
           "ratio_engine_over_anchor": round(max(eng) / max(anc), 3) if anc else None}
    if args.device.startswith("cuda"):
        out["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        out["gpu"] = torch.cuda.get_device_name()
        out["steps_per_s"] = round(max(eng) / args.batch, 1)
        out.update(adam_probe(trainer))
        peak = args.peak_bandwidth_gbps or (4800.0 if "H200" in out["gpu"] else 3350.0)
        out["card_peak_GBps"] = peak
        out["adam_fraction_of_peak_bandwidth"] = round(out["adam_achieved_GBps"] / peak, 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
