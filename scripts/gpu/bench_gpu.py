"""CUDA path of the engine: throughput, peak memory and the step against its roofline, with anchors.

Main configuration (issue 16): ComplEx, dim 2000 (1000 complex numbers), batch 1024, 512 batch-shared
negatives, BCE_adv + DURA, Adam, on a synthetic graph of ogbl-biokg's shape (93,773 entities, 51
relations, 4.76 M train triples, Zipf-like entity popularity). Measured in one run, side by side:

* anchors: device-to-device copy bandwidth and the fp32 GEMM rate (tf32 off);
* training triples/s of the first engine's step (``old``, ``ReferenceTrainer``), the row step
  (``new``), the row step compiled with CUDA graphs (``compile: true``), with bf16 autocast, and the whole step
  replayed from one CUDA graph (``cuda_graph: true``, :mod:`kgtuner.kge.graph_step`), also with TF32 products;
* each run's peak GPU memory; the row-sparse Adam step alone (CUDA events) against the bytes it must
  move; the step time against its roofline (GEMM FLOPs at the measured rate plus row traffic at the
  measured copy bandwidth);
* whether a row step synchronises with the host (``torch.cuda.set_sync_debug_mode("error")``);
* filtered evaluation time against its GEMM floor;
* with ``--models all``: every model of the search space at its paper dimension (stage-2 values:
  2000, RESCAL 1000, TuckER 500, ConvE 200) with sampled negatives and with 1VsAll and kVsAll.

    python scripts/gpu/bench_gpu.py                          # needs a CUDA GPU
    python scripts/gpu/bench_gpu.py --models all --steps 100
    python scripts/gpu/bench_gpu.py --smoke                  # tiny CPU run of every code path of this script
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from kgtuner.data import FilterIndex, KnowledgeGraph
from kgtuner.kge import MODELS, Trainer, TrainConfig
from kgtuner.kge.evaluation import evaluate_filtered
from kgtuner.kge.reference_step import ReferenceTrainer

DEVICE = "cuda"
#: the run of the whole step replayed from one CUDA graph (``train.cuda_graph``): the engine target's run
GRAPH_RUN = "new, cuda_graph: true"
PAPER_DIM = {"rescal": 1000, "tucker": 500, "conve": 200}


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


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


class Timer:
    """Elapsed seconds of a block: CUDA events on the GPU, the wall clock on CPU (smoke runs)."""

    def __enter__(self):
        if DEVICE == "cuda":
            self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            self.t = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if DEVICE == "cuda":
            self.end.record()
            self.end.synchronize()
            self.seconds = self.start.elapsed_time(self.end) / 1e3
        else:
            self.seconds = time.perf_counter() - self.t
        return False


def copy_bandwidth(nbytes: int) -> float:
    """Device copy rate in bytes/s, counting bytes read plus bytes written."""
    a = torch.empty(nbytes // 4, dtype=torch.float32, device=DEVICE).uniform_()
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    reps = 10
    with Timer() as t:
        for _ in range(reps):
            b.copy_(a)
    return 2 * nbytes * reps / t.seconds


def gemm_rate(n: int) -> float:
    """fp32 matrix-multiply rate in FLOP/s (tf32 off)."""
    torch.set_float32_matmul_precision("highest")
    a, b = torch.randn(n, n, device=DEVICE), torch.randn(n, n, device=DEVICE)
    for _ in range(2):
        a @ b
    reps = 5
    with Timer() as t:
        for _ in range(reps):
            a @ b
    return 2 * n ** 3 * reps / t.seconds


def train_run(cls, kg: KnowledgeGraph, cfg: dict, steps: int, warmup: int) -> tuple[dict, Trainer]:
    """Triples/s and peak memory of ``steps`` steps after ``warmup`` (compilation, allocator, cuBLAS)."""
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    bare = KnowledgeGraph(kg.name, kg.entities, kg.relations, kg.train, kg.valid[:0], kg.test[:0])
    trainer = cls(TrainConfig.from_dict({**cfg, "max_steps": warmup, "max_epochs": None, "valid_every": 10 ** 9,
                                         "device": DEVICE, "seed": 0}), bare)
    t0 = time.perf_counter()
    trainer.fit()
    _sync()
    setup = time.perf_counter() - t0
    trainer.cfg.max_steps = warmup + steps
    with Timer() as t:
        trainer.fit()
    out = {"triples_per_s": steps * cfg["batch_size"] / t.seconds, "step_ms": t.seconds / steps * 1e3,
           "warmup_s": setup,
           "peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30 if DEVICE == "cuda" else float("nan")}
    return out, trainer


def adam_probe(trainer: Trainer, reps: int = 20) -> dict:
    """The row-sparse Adam update of one step's entity rows alone: time and the bytes it must move."""
    batch = trainer._epoch_batches()[:trainer.cfg.batch_size]
    times, nbytes = [], []
    for _ in range(reps):
        for opt in trainer.optimizers:
            opt.zero_grad(set_to_none=True)
        _, updates = trainer._row_step(batch)
        opt, weight, ids, grads, rows = updates[0]  # the entity table
        # read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq (distinct rows)
        distinct = int(torch.unique(ids).numel())
        nbytes.append(7 * distinct * weight.shape[1] * weight.element_size())
        with Timer() as t:
            opt.step_rows(weight, ids, grads, rows, distinct=trainer.dedup_rows)
        times.append(t.seconds)
    return {"adam_s": float(np.median(times[3:])), "adam_bytes": float(np.median(nbytes)),
            "touched_rows": nbytes[-1] // (7 * trainer.model.entity.weight.shape[1] * 4)}


def sync_check(trainer: Trainer, steps: int = 5) -> str:
    """Run row steps under ``torch.cuda.set_sync_debug_mode("error")``: "none", or the first host sync."""
    if DEVICE != "cuda":
        return "n/a (CPU)"
    batch = trainer._epoch_batches()[:trainer.cfg.batch_size]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(steps):
            trainer._train_step(batch)
        return "none"
    except RuntimeError as err:
        return f"sync: {err}"[:200]
    finally:
        torch.cuda.set_sync_debug_mode(0)


def roofline(cfg: dict, rows: int, gemm: float, bw: float) -> float:
    """Seconds a sampled-negative bilinear step needs at best: its 3 products [2B,d]x[d,m] at the GEMM
    rate plus its row traffic at the copy bandwidth (gather the rows; Adam reads 4 and writes 3 rows)."""
    B, d, m = cfg["batch_size"], cfg["dim"], cfg["negatives"]
    flops = 3 * 2 * (2 * B) * d * m
    nbytes = 4 * d * ((2 * B + m) + 7 * rows)
    return flops / gemm + nbytes / bw


#: Distance models score all entities without a matrix product: with 1VsAll/kVsAll at the paper's dimension they
#: train in chunks at seconds a step (docs/gpu/run3), so the model table runs them last, on a small step budget.
DISTANCE_MODELS = ("transe", "rotate")
SLOW_STEPS, SLOW_WARMUP = 3, 1


def model_plan(steps: int, smoke: bool) -> list[tuple[dict, int, int]]:
    """The model table's configurations as ``(cfg, steps, warmup)``: every model at its paper dimension, sampled (512
    shared negatives) and 1VsAll / kVsAll; the distance models' 1VsAll/kVsAll rows last, with ``SLOW_STEPS`` steps
    each, so a table cut at its time limit has measured every other row."""
    fast, slow = [], []
    for name in MODELS:
        dim = 16 if smoke else PAPER_DIM.get(name, 2000)
        for negatives, loss in ((8 if smoke else 512, "BCE_adv"), ("1VsAll", "CE"), ("kVsAll", "BCE_mean")):
            cfg = {"model": name, "dim": dim, "batch_size": 64 if smoke else 1024, "negatives": negatives,
                   "loss": loss, "regularizer": "DURA", "optimizer": "Adam", "lr": 1e-3}
            if name in DISTANCE_MODELS and isinstance(negatives, str):
                slow.append((cfg, min(steps, SLOW_STEPS), SLOW_WARMUP))
            else:
                fast.append((cfg, steps, 3))
    return fast + slow


def model_table(kg: KnowledgeGraph, steps: int, smoke: bool, on_row=None, budget_s: float | None = None) -> list[dict]:
    """The rows of :func:`model_plan`, measured in its order (``on_row(row)`` after each, so a run stopped at its
    time limit keeps what it measured). ``budget_s``: a row is not started once that many seconds have passed; it
    is recorded as ``skipped`` (the slow rows come last, so they are the ones a short budget leaves out)."""
    rows = []
    t0 = time.perf_counter()
    for cfg, n_steps, warmup in model_plan(steps, smoke):
        name, dim, negatives = cfg["model"], cfg["dim"], cfg["negatives"]
        if budget_s is not None and time.perf_counter() - t0 >= budget_s:
            rows.append({"model": name, "dim": dim, "negatives": negatives,
                         "skipped": f"not started: the table's {budget_s:.0f} s budget was spent"})
            if on_row is not None:
                on_row(rows[-1])
            continue
        try:
            res, trainer = train_run(Trainer, kg, cfg, n_steps, warmup=warmup)
            rows.append({"model": name, "dim": dim, "negatives": negatives, **res})
            del trainer
        except torch.OutOfMemoryError as err:
            rows.append({"model": name, "dim": dim, "negatives": negatives, "error": f"OOM: {err}"[:120]})
        if on_row is not None:
            on_row(rows[-1])
    return rows


def print_model_header() -> None:
    print("\n| model | dim | negatives | triples/s | step ms | peak GiB |")
    print("|---|---:|---|---:|---:|---:|", flush=True)


def print_model_row(r: dict) -> None:
    if "error" in r or "skipped" in r:
        print(f"| {r['model']} | {r['dim']} | {r['negatives']} | {r.get('error') or r['skipped']} | | |", flush=True)
    else:
        print(f"| {r['model']} | {r['dim']} | {r['negatives']} | {r['triples_per_s']:,.0f} | "
              f"{r['step_ms']:.2f} | {r['peak_gib']:.2f} |", flush=True)


def print_model_table(table: list[dict]) -> None:
    """The model table as Markdown (nothing when empty)."""
    if table:
        print_model_header()
        for r in table:
            print_model_row(r)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--entities", type=int, default=93_773)
    ap.add_argument("--relations", type=int, default=51)
    ap.add_argument("--train-triples", type=int, default=4_762_678)
    ap.add_argument("--eval-triples", type=int, default=5_000)
    ap.add_argument("--models", choices=["main", "all", "table"], default="main",
                    help="main: the main configuration; table: every model only; all: both")
    ap.add_argument("--budget", type=float, default=None,
                    help="model table: start no row after this many seconds (the rest are recorded as skipped)")
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run of every code path of this script")
    args = ap.parse_args()
    global DEVICE
    if args.smoke:
        DEVICE = "cpu"
        args.entities, args.relations, args.train_triples, args.eval_triples = 300, 5, 3000, 50
        args.steps = min(args.steps, 4)
    elif not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA GPU (use --smoke for a CPU check of the script)")
    print(f"device: {torch.cuda.get_device_name(0) if DEVICE == 'cuda' else 'cpu'}, torch {torch.__version__}",
          flush=True)
    kg = synthetic_graph(args.entities, args.relations, args.train_triples, args.eval_triples)
    if args.models == "table":  # every model only (scripts/gpu/gpu_check.sh runs it as its own step)
        print_model_header()
        table = model_table(kg, max(3, args.steps), args.smoke, on_row=print_model_row, budget_s=args.budget)
        print(json.dumps({"models": table}, default=float))
        return
    bw = copy_bandwidth(2 << 30 if DEVICE == "cuda" else 1 << 24)
    flops = gemm_rate(8192 if DEVICE == "cuda" else 256)
    dim = 16 if args.smoke else 2000
    cfg = {"model": "complex", "dim": dim, "batch_size": 64 if args.smoke else 1024,
           "negatives": 8 if args.smoke else 512, "loss": "BCE_adv", "regularizer": "DURA", "reg_weight": 1e-3,
           "optimizer": "Adam", "lr": 1e-3}
    warmup = 3 if args.smoke else 30
    runs = {}
    trainer = None
    for label, cls, extra in (("old (first engine)", ReferenceTrainer, {}), ("new (row step)", Trainer, {}),
                              ("new, compile: true", Trainer, {"compile": True}),
                              ("new, bf16 autocast", Trainer, {"amp": True}),
                              (GRAPH_RUN, Trainer, {"cuda_graph": True}),
                              ("new, cuda_graph + tf32", Trainer, {"cuda_graph": True, "tf32": True})):
        res, tr = train_run(cls, kg, {**cfg, **extra}, args.steps, warmup)
        runs[label] = res
        if label == "new (row step)":
            trainer = tr
            res.update(adam_probe(tr, reps=5 if args.smoke else 20))
            res["host_syncs_in_step"] = sync_check(tr)
        else:
            if label == GRAPH_RUN:
                res["host_syncs_in_step"] = sync_check(tr)
                res["step_note"] = tr.step_note
            del tr
    fi = FilterIndex.from_graph(kg)
    trainer.model.eval()
    with Timer() as t:
        metrics = evaluate_filtered(trainer.model, kg.test, fi)
    eval_s = t.seconds
    # head + tail queries, each one [B, dim] x [dim, E] real product (2 FLOP per multiply-add)
    eval_floor = 2 * (2 * len(kg.test)) * kg.num_entities * dim / flops

    new = runs["new (row step)"]
    roof = roofline(cfg, new["touched_rows"], flops, bw)
    print("\n| quantity | value | anchor | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| copy bandwidth (read+write) | {bw / 1e12:.2f} TB/s | | |")
    print(f"| fp32 GEMM | {flops / 1e12:.1f} TFLOP/s | | |")
    base = runs["old (first engine)"]["triples_per_s"]
    for label, r in runs.items():
        print(f"| train triples/s, {label} | {r['triples_per_s']:,.0f} | {base:,.0f} (old) | "
              f"{r['triples_per_s'] / base:.2f} |")
        print(f"| peak GPU memory, {label} | {r['peak_gib']:.2f} GiB | | |")
    for label in ("new (row step)", "new, compile: true", GRAPH_RUN):
        print(f"| step time vs roofline, {label} | {runs[label]['step_ms']:.3f} ms | {roof * 1e3:.3f} ms roofline "
              f"| {runs[label]['step_ms'] / (roof * 1e3):.1f}x |")
    adam_bw = new["adam_bytes"] / new["adam_s"]
    print(f"| row-sparse Adam step (median, {new['touched_rows']} rows) | {new['adam_s'] * 1e3:.3f} ms, "
          f"{new['adam_bytes'] / 1e6:.0f} MB | {new['adam_bytes'] / bw * 1e3:.3f} ms at copy bw | "
          f"{adam_bw / bw:.2%} of copy bw |")
    print(f"| host-device syncs inside 5 row steps | {new['host_syncs_in_step']} | | |")
    print(f"| host-device syncs inside 5 captured steps | {runs[GRAPH_RUN]['host_syncs_in_step']} | | |")
    print(f"| filtered eval, {len(kg.test)} test triples x {kg.num_entities} entities | {eval_s:.3f} s | "
          f"{eval_floor:.3f} s GEMM floor | {eval_s / eval_floor:.1f}x floor |")
    table = model_table(kg, max(3, args.steps // 4), args.smoke) if args.models == "all" else []
    print_model_table(table)
    print(json.dumps({"copy_bw": bw, "gemm": flops, "runs": runs, "roofline_s": roof, "eval_s": eval_s,
                      "eval_floor_s": eval_floor, "metrics": metrics, "models": table}, default=float))


if __name__ == "__main__":
    main()
