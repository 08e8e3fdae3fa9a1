"""Distance models scoring every entity with gradients: the one-shot path (the anchor) against the chunked one.

For TransE (``torch.cdist`` one-shot, ``ChunkedL1`` chunked) and RotatE (``ComplexL1`` one-shot,
``ChunkedComplexL1`` chunked, 2^22 elements a chunk), whatever the models' own limits, one forward and backward of ``model.compare(q, entity table)`` with ``--batch``
queries against ``--entities`` entities at ``--dim``, each path in its own process (one thread), so the peak
resident memory it adds (``ru_maxrss``) is its own; prints both and the chunked/one-shot ratios. On CUDA
(``--device cuda``) the peak is ``torch.cuda.max_memory_allocated``.

    python scripts/perf/bench_distance_chunks.py [--batch 256] [--entities 8192] [--dim 256] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time, torch
from kgtuner.kge import MODELS
name, chunked, batch, entities, dim, device = sys.argv[1], sys.argv[2] == "1", *map(int, sys.argv[3:6]), sys.argv[6]
torch.manual_seed(0)
model = MODELS[name](entities, 1, dim).to(device)
if chunked:
    model.chunk_limits = {device: (0, 1 << 22)}
else:
    model.chunk_limits = {}
q = torch.randn(batch, dim, device=device, requires_grad=True)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the peak over the warm-up and the timed pass
if device == "cuda":
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
model.compare(q, model.entity.weight).sum().backward()  # warm-up
t = time.perf_counter()
model.compare(q, model.entity.weight).sum().backward()
if device == "cuda":
    torch.cuda.synchronize()
s = time.perf_counter() - t
peak = (torch.cuda.max_memory_allocated() if device == "cuda"
        else (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
print(json.dumps({"s": s, "peak_gib": peak / 2**30}))
"""


def run(name: str, chunked: bool, args) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, name, "1" if chunked else "0", str(args.batch),
                          str(args.entities), str(args.dim), args.device], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--entities", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    print(f"{args.batch} queries x {args.entities} entities x dim {args.dim} on {args.device} "
          f"([B, C, d] as float32: {args.batch * args.entities * args.dim * 4 / 2**30:.2f} GiB)")
    print("| model | path | forward+backward s | peak added GiB | time vs one-shot |")
    print("|---|---|---:|---:|---:|")
    for name in ("transe", "rotate"):
        one, chunk = run(name, False, args), run(name, True, args)
        for label, r in (("one-shot", one), ("chunked", chunk)):
            print(f"| {name} | {label} | {r['s']:.3f} | {r['peak_gib']:.3f} | {r['s'] / one['s']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
