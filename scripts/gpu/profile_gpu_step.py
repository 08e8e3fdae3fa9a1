"""Where the row step's time goes on a GPU: torch.profiler over the main configuration of bench_gpu.py.

Prints, for the new row step, the whole step replayed from one CUDA graph (``train.cuda_graph``), and the first
engine's step as their anchor, the wall time per step, the
GPU's busy time per step (sum of kernel times) and the top operators by self CUDA time and by self CPU
time. A step far above its roofline is either GPU-bound (kernels) or host-bound (launch overhead,
synchronisations); the two totals say which.

    python scripts/gpu/profile_gpu_step.py --out DIR     # needs a CUDA GPU (docs/gpu/README.md)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import time

import torch
from torch.profiler import ProfilerActivity, profile

HERE = pathlib.Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("bench_gpu", HERE / "bench_gpu.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

from kgtuner.kge import Trainer  # noqa: E402
from kgtuner.kge.reference_step import ReferenceTrainer  # noqa: E402


def kernel_us(events) -> float:
    """Microseconds the device spent in kernels: the device-side events alone. ``key_averages()`` lists each kernel
    twice, as its own event and within the self device time of the operator that launched it, so a sum over every
    event counts each kernel twice (runs 1-3 did: run 2's "2.56 ms of kernels a step" was 1.28 ms). This is the
    profiler table's "Self CUDA time total"."""
    from torch.autograd import DeviceType

    return float(sum(e.self_device_time_total for e in events if e.device_type != DeviceType.CPU))


def profile_run(label, cls, kg, cfg, steps, out):
    _, trainer = bench.train_run(cls, kg, cfg, steps=5, warmup=20)
    bench._sync()
    trainer.cfg.max_steps = trainer.step + steps
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if bench.DEVICE == "cuda" else [])) as prof:
        trainer.fit()
        bench._sync()
    wall = time.perf_counter() - t0
    ka = prof.key_averages()
    cuda_us = kernel_us(ka)
    print(f"\n## {label}: {steps} steps, wall {wall / steps * 1e3:.3f} ms/step under the profiler, "
          f"kernels {cuda_us / steps / 1e3:.3f} ms/step")
    print(ka.table(sort_by="self_device_time_total", row_limit=18, max_name_column_width=60))
    print(ka.table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60))
    rows = [{"name": e.key, "count": e.count, "self_cuda_us": e.self_device_time_total,
             "self_cpu_us": e.self_cpu_time_total} for e in ka]
    return {"label": label, "steps": steps, "wall_ms_per_step": wall / steps * 1e3,
            "kernel_ms_per_step": cuda_us / steps / 1e3, "ops": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--train-triples", type=int, default=1_000_000)
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run of this script's code paths")
    args = ap.parse_args()
    ents, dim = 93_773, 2000
    if args.smoke:
        bench.DEVICE, ents, dim, args.train_triples, args.steps = "cpu", 300, 16, 3000, 3
    elif not torch.cuda.is_available():
        raise SystemExit("profile_gpu_step.py needs a CUDA GPU (use --smoke for a CPU check of the script)")
    print(f"device: {bench.DEVICE}, torch {torch.__version__}", flush=True)
    kg = bench.synthetic_graph(ents, 51, args.train_triples, 100)
    cfg = {"model": "complex", "dim": dim, "batch_size": 1024, "negatives": 512, "loss": "BCE_adv",
           "regularizer": "DURA", "reg_weight": 1e-3, "optimizer": "Adam", "lr": 1e-3}
    res = [profile_run("new (row step)", Trainer, kg, cfg, args.steps, args.out),
           profile_run("captured (cuda_graph: true)", Trainer, kg, {**cfg, "cuda_graph": True}, args.steps, args.out),
           profile_run("old (first engine)", ReferenceTrainer, kg, cfg, args.steps, args.out)]
    pathlib.Path(args.out, "profile_gpu_step.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
