"""CUDA path of the engine: throughput, peak memory and the Adam step's memory-bandwidth use.

ComplEx, dim 2000 (1000 complex numbers), batch 1024, 512 batch-shared negatives, BCE_adv, on a
synthetic graph of ogbl-biokg's shape (93,773 entities, 51 relations, 4.76 M train triples). Prints,
side by side with anchors measured in the same run (a device-to-device copy for bandwidth, a large
GEMM for arithmetic): training triples/s in fp32 and with bf16 autocast (``amp``), peak GPU memory,
the Adam step's time and bytes moved against the copy bandwidth, and the filtered evaluation time.

    python scripts/bench_gpu.py                 # needs a CUDA GPU
    python scripts/bench_gpu.py --steps 300 --train-triples 4762678
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from kgtuner.data import FilterIndex, KnowledgeGraph
from kgtuner.kge import Trainer, TrainConfig
from kgtuner.kge.evaluation import evaluate_filtered

DEVICE = "cuda"


def synthetic_graph(n_ent: int, n_rel: int, n_train: int, n_eval: int, seed: int = 0) -> KnowledgeGraph:
    """Random triples with a skewed (Zipf-like) entity popularity, as real KGs have."""
    rng = np.random.default_rng(seed)
    pop = 1.0 / np.arange(1, n_ent + 1) ** 0.8
    pop /= pop.sum()
    n = n_train + 2 * n_eval
    triples = np.stack([rng.choice(n_ent, n, p=pop), rng.integers(0, n_rel, n), rng.choice(n_ent, n, p=pop)], 1)
    names_e = np.array([f"e{i}" for i in range(n_ent)])
    names_r = np.array([f"r{i}" for i in range(n_rel)])
    return KnowledgeGraph("biokg-shaped", names_e, names_r, triples[:n_train],
                          triples[n_train:n_train + n_eval], triples[n_train + n_eval:])


def copy_bandwidth(device: torch.device, nbytes: int = 2 << 30) -> float:
    """Device-to-device copy rate in bytes/s, counting bytes read plus bytes written."""
    a = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    reps = 10
    for _ in range(reps):
        b.copy_(a)
    end.record()
    torch.cuda.synchronize()
    return 2 * nbytes * reps / (start.elapsed_time(end) / 1e3)


def gemm_rate(device: torch.device, n: int = 8192) -> float:
    """fp32 matrix-multiply rate in FLOP/s (tf32 off)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    for _ in range(2):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    reps = 5
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n ** 3 * reps / (time.perf_counter() - t)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class StepTimer:
    """Wraps each optimizer's ``step`` with CUDA events; records time and touched embedding rows."""

    def __init__(self, optimizers):
        self.ms: list[float] = []
        self.bytes: list[int] = []
        for opt in optimizers:
            self._wrap(opt)

    def _wrap(self, opt) -> None:
        inner = opt.step

        def step(*args, **kwargs):
            moved = 0
            for group in opt.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if p.grad.is_sparse:
                        rows = p.grad.coalesce().indices().shape[1]
                        width = p.shape[1] if p.dim() > 1 else 1
                        # read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq
                        moved += 7 * rows * width * p.element_size()
                    else:
                        moved += 7 * p.numel() * p.element_size()
            _sync()
            t = time.perf_counter()
            out = inner(*args, **kwargs)
            _sync()
            self.ms.append((time.perf_counter() - t) * 1e3)
            self.bytes.append(moved)
            return out

        opt.step = step


def run(kg: KnowledgeGraph, amp: bool, steps: int, timed_adam: bool) -> dict:
    cfg = TrainConfig.from_dict({
        "model": "complex", "dim": 2000, "batch_size": 1024, "negatives": 512, "loss": "BCE_adv",
        "regularizer": "DURA", "reg_weight": 1e-3, "optimizer": "Adam", "lr": 1e-3, "max_steps": steps,
        "max_epochs": None, "valid_every": 10 ** 9, "amp": amp, "device": DEVICE, "seed": 0})
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(cfg, kg)
    timer = StepTimer(trainer.optimizers) if timed_adam else None
    # warm-up (allocator, cuBLAS handles), then the timed run on the same trainer
    trainer.cfg.max_steps = 20
    trainer.kg = KnowledgeGraph(kg.name, kg.entities, kg.relations, kg.train, kg.valid[:0], kg.test[:0])
    trainer.fit()
    if timer:
        timer.ms.clear()
        timer.bytes.clear()
    trainer.cfg.max_steps = 20 + steps
    _sync()
    t0 = time.perf_counter()
    trainer.fit()
    _sync()
    wall = time.perf_counter() - t0
    out = {"amp": amp, "triples_per_s": steps * cfg.batch_size / wall,
           "peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30 if DEVICE == "cuda" else float("nan")}
    if timer:
        out["adam_ms"] = float(np.median(timer.ms))
        out["adam_bytes"] = float(np.median(timer.bytes))
    trainer.kg = kg
    return out, trainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--entities", type=int, default=93_773)
    ap.add_argument("--relations", type=int, default=51)
    ap.add_argument("--train-triples", type=int, default=4_762_678)
    ap.add_argument("--eval-triples", type=int, default=5_000)
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run to check the script")
    args = ap.parse_args()
    global DEVICE
    if args.smoke:  # CPU smoke test of this script itself (tiny sizes, anchors skipped)
        DEVICE = "cpu"
    elif not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA GPU (use --smoke for a CPU check of the script)")
    print(f"device: {torch.cuda.get_device_name(0) if DEVICE == 'cuda' else 'cpu'}, torch {torch.__version__}",
          flush=True)
    bw = copy_bandwidth(torch.device(DEVICE)) if DEVICE == "cuda" else 1e10
    flops = gemm_rate(torch.device(DEVICE)) if DEVICE == "cuda" else 1e11
    kg = synthetic_graph(args.entities, args.relations, args.train_triples, args.eval_triples)
    rows = []
    trainer = None
    for amp in (False, True):
        res, tr = run(kg, amp, args.steps, timed_adam=not amp)
        rows.append(res)
        if not amp:
            trainer = tr
    fi = FilterIndex.from_graph(kg)
    _sync()
    t = time.perf_counter()
    trainer.model.eval()
    with torch.no_grad():
        metrics = evaluate_filtered(trainer.model, kg.test, fi)
    _sync()
    eval_s = time.perf_counter() - t
    # head + tail queries, each one [B, dim] x [dim, E] real product (2 FLOP per multiply-add)
    eval_floor = 2 * (2 * len(kg.test)) * kg.num_entities * 2000 / flops

    fp32 = rows[0]
    print("\n| quantity | value | anchor | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| copy bandwidth (read+write) | {bw / 1e12:.2f} TB/s | | |")
    print(f"| fp32 GEMM | {flops / 1e12:.1f} TFLOP/s | | |")
    for r in rows:
        print(f"| train triples/s ({'bf16 autocast' if r['amp'] else 'fp32'}) | {r['triples_per_s']:,.0f} | "
              f"{fp32['triples_per_s']:,.0f} (fp32) | {r['triples_per_s'] / fp32['triples_per_s']:.2f} |")
        print(f"| peak GPU memory ({'amp' if r['amp'] else 'fp32'}) | {r['peak_gib']:.2f} GiB | | |")
    adam_bw = fp32["adam_bytes"] / (fp32["adam_ms"] / 1e3)
    print(f"| Adam step (SparseAdam, median) | {fp32['adam_ms']:.3f} ms, {fp32['adam_bytes'] / 1e6:.0f} MB | "
          f"{fp32['adam_bytes'] / bw * 1e3:.3f} ms at copy bw | {adam_bw / bw:.2%} of copy bw |")
    print(f"| filtered eval, {len(kg.test)} test triples x {kg.num_entities} entities | {eval_s:.3f} s | "
          f"{eval_floor:.3f} s GEMM floor | {eval_s / eval_floor:.1f}x floor |")
    print(json.dumps({"copy_bw": bw, "gemm": flops, "runs": rows, "eval_s": eval_s, "metrics": metrics}))


if __name__ == "__main__":
    main()
