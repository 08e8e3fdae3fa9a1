"""Step 4a of scripts/gpu/gpu_check.sh: a real CUDA out-of-memory in ``kgtuner.train``, and the GPU afterwards.

The search's trials cannot be given an impossible size from the command line (every configuration comes
from the searcher, inside the space), so the out-of-memory is forced here, before the launch, with the
configuration ``python -m kgtuner.train`` would run:

1. a small run (warms CUDA, cuBLAS); ``torch.cuda.memory_allocated()`` after it is the baseline;
2. the same configuration with ``batch_size`` above the train set (one batch = every train triple) and
   ``dim`` so large that one ``[batch, dim]`` float32 block exceeds the whole card: the first training
   step must raise ``torch.OutOfMemoryError`` (the entity table itself stays small, so the host never holds
   more than a few GB: the model is built on the host, then moved);
3. ``memory_allocated()`` back at the baseline (nothing of the failed run is left on the card), measured
   after ``gc.collect()`` (the value before it is recorded too);
4. the small run again: it must finish (status ok);
5. the CLI: ``python -m kgtuner.train`` with the impossible configuration ends with a non-zero status (not
   killed by a signal, no hang) and names the out-of-memory error.

Writes ``OUT/oom.json``. Without CUDA (smoke runs) only runs 1 and 4 are made: there is no safe way to
exhaust host memory, so the out-of-memory figures are recorded as not applicable.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import subprocess
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from kgtuner.paths import CONF_DIR

SMALL = ["model=complex", "train.dim=64", "train.batch_size=512", "train.negatives=64", "train.max_epochs=null",
         "train.patience=1000", "train.seed=0"]


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ogb-root", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=100, help="steps of the small runs")
    args = ap.parse_args()
    import torch

    from kgtuner.train import load_data, run

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    data = ["data=ogbl-biokg", f"data.ogb_root={args.ogb_root.resolve()}"]
    small = data + SMALL + [f"train.device={args.device}", f"train.max_steps={args.steps}",
                            f"train.valid_every={args.steps}"]
    cuda = args.device.startswith("cuda")

    def mem(collect: bool = True):
        if not cuda:
            return None
        if collect:
            gc.collect()
        return torch.cuda.memory_allocated()

    rec: dict = {"device": args.device, "small_config": small}

    t = time.perf_counter()
    first = run(_compose(small), out / "before")
    rec["before"] = {"status": first["status"], "valid": first["valid"], "s": round(time.perf_counter() - t, 1)}
    rec["baseline_bytes"] = mem()
    if cuda:
        kg = load_data(_compose(data).data)
        n_train, n_ent = len(kg.train), kg.num_entities
        del kg
        total = torch.cuda.get_device_properties(torch.device(args.device)).total_memory
        dim = 2 * math.ceil(total / (4 * n_train) / 2) + 2  # one [n_train, dim] float32 block > the card
        host_gb = n_ent * dim * 4 / 1e9
        huge = data + SMALL + [f"train.device={args.device}", "train.max_steps=2", "train.valid_every=2", f"train.dim={dim}",
                               f"train.batch_size={10 * n_train}"]
        rec.update({"total_bytes": total, "oom_dim": dim, "oom_batch": 10 * n_train, "oom_host_table_gb": round(host_gb, 2),
                    "oom_config": huge})
        torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        try:
            result = run(_compose(huge), out / "oom")
            rec["oom"] = {"raised": None, "status": result.get("status")}
        except torch.OutOfMemoryError as err:
            rec["oom"] = {"raised": type(err).__name__, "message": str(err).splitlines()[0][:300]}
        except Exception as err:  # noqa: BLE001 - recorded: the verifier expects kgtuner's out-of-memory error
            rec["oom"] = {"raised": type(err).__name__, "message": str(err).splitlines()[0][:300] if str(err) else ""}
        rec["oom"]["s"] = round(time.perf_counter() - t, 1)
        rec["oom"]["peak_bytes"] = torch.cuda.max_memory_allocated()
        rec["after_oom_before_gc_bytes"] = mem(collect=False)
        rec["after_oom_bytes"] = mem()
        rec["after_oom_reserved_bytes"] = torch.cuda.memory_reserved()
        torch.cuda.empty_cache()
        rec["after_empty_cache_reserved_bytes"] = torch.cuda.memory_reserved()
    t = time.perf_counter()
    second = run(_compose(small), out / "after")
    rec["after"] = {"status": second["status"], "valid": second["valid"], "s": round(time.perf_counter() - t, 1)}
    rec["after_bytes"] = mem()
    if cuda:  # the CLI's report of the same failure (a separate process: its exit status and last words)
        cmd = [sys.executable, "-m", "kgtuner.train", *rec["oom_config"], f"hydra.run.dir={out / 'oom_cli'}"]
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            rc, err_text = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, err_text = "timeout", (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr or "")
        (out / "oom_cli.stderr.txt").write_text(err_text)
        lines = [ln for ln in err_text.splitlines() if ln.strip()]
        rec["cli"] = {"rc": rc, "s": round(time.perf_counter() - t, 1),
                      "names_oom": "OutOfMemoryError" in err_text or "out of memory" in err_text,
                      "last_line": lines[-1][:300] if lines else ""}
    (out / "oom.json").write_text(json.dumps(rec, indent=2, default=str))
    print(json.dumps(rec, indent=2, default=str), flush=True)


if __name__ == "__main__":
    main()
