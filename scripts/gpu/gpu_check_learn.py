"""Step 3 of scripts/gpu/gpu_check.sh: the same ``python -m kgtuner.train`` configuration on the device and on
CPU, on the synthetic ogbl-biokg of ``scripts/data/make_ogb_biokg.py`` (the real ogb loader, typed negatives,
OGB's evaluator), validation MRR compared at equal steps.

Three runs, started together (each CPU run on its share of the cores):

* ``device``: ``train.device=DEVICE``, seed 0, ``--steps`` steps (a few thousand);
* ``cpu0`` / ``cpu1``: ``train.device=cpu``, seeds 0 and 1, only their first validations (``--cpu-steps``).
  With ``--device cpu`` (smoke runs) the device run *is* the CPU seed-0 run, so ``cpu0`` is not run again;
* ``graph``: the device run with ``train.cuda_graph=true`` (the whole step replayed from one CUDA graph), and
  ``tf32``: the same with ``train.tf32=true`` as well: their learning against the eager device run at equal
  steps (on CPU, ``graph`` runs the same static step eagerly and ``tf32`` is not run).

Writes ``OUT/learn.json`` (every validation of every run, the test metrics, wall times) and each run's
log and run directory under ``OUT/<run>/``; the targets are applied by ``scripts/gpu/gpu_check_verify.py``.
The CUDA generator draws other random numbers than the CPU one, so the device run is one more draw of
training noise: two CPU seeds measure that noise, and the verifier's tolerance is built on it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

#: the configuration of every run (Hydra overrides of conf/train.yaml); lr_patience=0: no lr decay, so
#: the schedule is the same whatever the validations say
CONFIG = ["model=complex", "train.dim=64", "train.batch_size=1024", "train.negatives=256", "train.loss=BCE_adv",
          "train.regularizer=DURA", "train.reg_weight=0.001", "train.optimizer=Adam", "train.lr=0.01",
          "train.max_epochs=null", "train.patience=1000", "train.lr_patience=0"]
SMOKE = ["train.batch_size=256", "train.negatives=64"]
LINE = re.compile(r"^step\s+(\d+)\s.*valid mrr\s+(\S+)")


def _run(name: str, out: Path, overrides: list[str], threads: int) -> subprocess.Popen:
    (out / name).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HYDRA_FULL_ERROR": "1"}
    log = open(out / name / "train.log", "w")
    cmd = [sys.executable, "-m", "kgtuner.train", *overrides, f"hydra.run.dir={out / name}"]
    (out / name / "command.txt").write_text(" ".join(cmd) + "\n")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    proc.started = time.perf_counter()  # type: ignore[attr-defined]
    return proc


def _result(name: str, out: Path, proc: subprocess.Popen) -> dict:
    rc = proc.wait()
    wall = time.perf_counter() - proc.started  # type: ignore[attr-defined]
    steps, mrr = [], []
    for line in (out / name / "train.log").read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if m:
            steps.append(int(m.group(1)))
            mrr.append(float(m.group(2)))
    metrics_file = out / name / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
    return {"rc": rc, "wall_s": round(wall, 1), "steps": steps, "valid_mrr": mrr, "test": metrics.get("test"),
            "status": metrics.get("status"), "triples_per_second": metrics.get("triples_per_second")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ogb-root", required=True, type=Path, help="root holding ogbl_biokg/ (make_ogb_biokg.py)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--device", default="cuda", help="cuda | cuda:N | cpu (smoke)")
    ap.add_argument("--steps", type=int, default=3000, help="steps of the device run")
    ap.add_argument("--cpu-steps", type=int, default=300, help="steps of the CPU runs (their first validations)")
    ap.add_argument("--valid-every", type=int, default=100)
    ap.add_argument("--smoke", action="store_true", help=f"toy sizes: {' '.join(SMOKE)}")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    data = ["data=ogbl-biokg", f"data.ogb_root={args.ogb_root.resolve()}"]
    config = CONFIG + (SMOKE if args.smoke else []) + [f"train.valid_every={args.valid_every}"]
    cores = os.cpu_count() or 1
    on_cpu = args.device == "cpu"
    runs = {"device": (args.device, 0, args.steps, []), "cpu1": ("cpu", 1, args.cpu_steps, []),
            "graph": (args.device, 0, args.steps if not on_cpu else args.cpu_steps, ["train.cuda_graph=true"])}
    if not on_cpu:
        runs["cpu0"] = ("cpu", 0, args.cpu_steps, [])
        runs["tf32"] = (args.device, 0, args.steps, ["train.cuda_graph=true", "train.tf32=true"])
    n_cpu_runs = sum(dev == "cpu" for dev, _, _, _ in runs.values())
    threads = max(1, (cores - (0 if on_cpu else 1)) // n_cpu_runs)
    procs = {name: _run(name, args.out, data + config + [f"train.device={dev}", f"train.seed={seed}",
                                                          f"train.max_steps={steps}", *extra],
                        threads if dev == "cpu" else 1)
             for name, (dev, seed, steps, extra) in runs.items()}
    results = {name: _result(name, args.out, p) for name, p in procs.items()}
    if on_cpu:  # the device run is the CPU seed-0 run: its first validations are cpu0's
        d = results["device"]
        k = sum(s <= args.cpu_steps for s in d["steps"])
        results["cpu0"] = {**d, "steps": d["steps"][:k], "valid_mrr": d["valid_mrr"][:k], "same_as": "device"}
    stats = json.loads((args.ogb_root / "ogbl_biokg" / "synthetic.json").read_text())
    record = {"device": args.device, "config": data + config, "cpu_threads_per_run": threads,
              "random_mrr": stats["random_mrr"], "dataset": stats, "runs": results}
    (args.out / "learn.json").write_text(json.dumps(record, indent=2))
    for name, r in results.items():
        print(f"{name:7s} rc {r['rc']} {r['wall_s']:7.1f} s  steps {r['steps']}  valid mrr {r['valid_mrr']}  "
              f"test {r['test']}", flush=True)
    sys.exit(0 if all(r["rc"] == 0 for r in results.values()) else 1)


if __name__ == "__main__":
    main()
