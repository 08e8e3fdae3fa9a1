"""RotatE's distance with its hand-written gradient against autograd through the plain formula (the anchor).

Forward and backward of ``sum_k |q_k - c_k|`` over ``[B, 1, dim/2]`` queries and ``[1, C, dim/2]`` shared
candidates, the two timed alternately in one process (single thread); prints each median and the ratio.

    python scripts/perf/bench_rotate_distance.py [--batch 512] [--candidates 128] [--dim 64] [--reps 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from kgtuner.kge.models.translational import complex_l1


def plain(q, c):
    qr, qi = q.chunk(2, dim=-1)
    cr, ci = c.chunk(2, dim=-1)
    return torch.sqrt((qr - cr).square() + (qi - ci).square() + 1e-12).sum(-1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--candidates", type=int, default=128)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(args.batch, 1, args.dim, generator=g, requires_grad=True)
    c = torch.randn(1, args.candidates, args.dim, generator=g, requires_grad=True)
    times = {"plain formula (autograd)": [], "kgtuner (ComplexL1)": []}
    fns = {"plain formula (autograd)": plain, "kgtuner (ComplexL1)": complex_l1}
    for rep in range(args.reps + 2):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn(q, c).sum().backward()
            if rep >= 2:  # two warm-up rounds
                times[name].append(time.perf_counter() - t)
    base = statistics.median(times["plain formula (autograd)"])
    print(f"RotatE distance, forward + backward, B={args.batch} C={args.candidates} dim={args.dim}, 1 thread, "
          f"median of {args.reps}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"  {name:26s} {m * 1e3:8.2f} ms   {base / m:5.2f}x the plain formula's speed")


if __name__ == "__main__":
    main()
