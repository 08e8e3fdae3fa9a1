"""Step ``packing`` of scripts/gpu/gpu_check.sh (issue 39): how many KGTuner stage-1 trials one device trains
in a fixed wall-clock window when 1, 2, 4 or 8 of them share it (``trial.stage1_per_gpu``), against one at a time.

A stage-1 trial here is what the search runs in stage 1: the decoupled space's stage-1 sizes (batch size and
dimension read from ``conf/space/decoupled.yaml``: 128 and 100), ComplEx with sampled negatives (128, BCE_adv,
DURA, Adam), a fixed number of steps (``--trial-steps``) and one cheap validation at its end (a sample of
``--valid-triples`` valid triples, filtered ranking), trained by ``kgtuner.kge.Trainer`` on a 20 % subgraph
(``kgtuner.data.sample_subgraph``, multi_rw, as stage 1) of the synthetic ogbl-biokg of step ``data``
(``--ogb-root``; without it, a random graph the script builds, ``--entities`` x ``--train-triples``).

How it measures:

* ``max(levels)`` worker processes (multiprocessing, spawn) start at once on the one device; each loads the
  subgraph, builds its filter index once (as a search's worker caches it), sets up CUDA and trains one short
  warm-up trial. None of that start-up is inside a window.
* Level k: workers 0..k-1 wait on one barrier, then each takes the same window of ``--window`` seconds from the
  moment it is released and trains trials back to back (a new ``Trainer`` each, seed = trial number) until the
  window ends: the trial in progress then stops (``should_stop``) and is not counted; a trial counts when it
  ended, validation included, inside the window. The other workers sit idle (their CUDA contexts cost memory,
  not device time). One pool for every level keeps the step short: processes and CUDA contexts start once.
* Per level: trials completed, steps and training triples (also those of the cut trial), aggregate
  triples/s = triples / window, and per worker ``torch.cuda.max_memory_allocated()`` (reset at the level's start;
  on CPU: none). Torch threads per worker: 1 on CPU (``--device cpu``: smoke runs on a 2-core machine); on CUDA
  ``cores // k``, as a search's ``trial.cpus: auto``.
* A worker that fails (CUDA out-of-memory, any error, a dead process) is recorded with its message, with what it
  completed before; the other workers go on, and so do later levels.

Writes ``OUT/packing.json`` (rewritten after each level, so a run stopped at its time limit keeps the levels it
measured): ``rows`` (one per level: ``k``, ``trials``, ``steps``, ``triples``, ``triples_per_s``, ``window_s``,
``failed_workers``, ``workers``), ``best_k`` (the packed level, k > 1, with the most trials; ties: the smaller
k), ``trials_k1``, ``trials_best``; prints a table. ``--budget SECONDS`` (the step's time): the window shrinks so
that start-up plus every level fits. The target is applied by ``scripts/gpu/gpu_check_verify.py``: the best
packed level trains more trials than k=1.

    python scripts/gpu/gpu_check_packing.py --ogb-root OUT/data/ogb --out OUT/packing     # on the GPU
    python scripts/gpu/gpu_check_packing.py --device cpu --smoke --out /tmp/packing       # CPU, toy sizes
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: the stage-1 trial besides its sizes (batch_size and dim come from the decoupled space's stage 1)
TRIAL = {"model": "complex", "negatives": 128, "loss": "BCE_adv", "adv_weight": 1.0, "regularizer": "DURA",
         "reg_weight": 1e-3, "optimizer": "Adam", "lr": 1e-3, "initializer": "xavier_uniform", "max_epochs": None,
         "patience": 1000, "lr_patience": 0}
SUBGRAPH_RATIO = 0.2
#: seconds a level needs besides its window (the cut trial's return, one validation, collecting the results)
TAIL_S = {"cuda": 3.0, "cpu": 6.0}
MIN_WINDOW_S = 2.0


def stage1_sizes() -> dict:
    """Stage 1's fixed batch size and dimension in the decoupled space (``conf/space/decoupled.yaml``)."""
    import yaml

    from kgtuner.paths import CONF_DIR

    params = yaml.safe_load((Path(CONF_DIR) / "space" / "decoupled.yaml").read_text())["params"]
    return {"batch_size": int(params["batch_size"]["value"]), "dim": int(params["dim"]["value"])}


def _bench_gpu():
    """scripts/gpu/bench_gpu.py as a module (its synthetic graph)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_gpu", Path(__file__).resolve().parent / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_graph(args) -> tuple[dict, dict]:
    """The stage-1 graph as ``KnowledgeGraph.to_arrays()`` and its description."""
    from kgtuner.data import KnowledgeGraph, load_dataset, sample_subgraph

    if args.ogb_root is not None:
        full = load_dataset("ogbl-biokg", ogb_root=args.ogb_root)
        source = f"synthetic ogbl-biokg ({args.ogb_root}): {full.num_entities:,} entities, {len(full.train):,} train"
    else:  # bench_gpu.py's Zipf-like random graph (the same draws), its duplicate triples dropped
        g = _bench_gpu().synthetic_graph(args.entities, 51, args.train_triples, 0)
        full = KnowledgeGraph("random", g.entities, g.relations, np.unique(g.train, axis=0), g.valid, g.test)
        source = f"random graph: {full.num_entities:,} entities, {len(full.train):,} train (Zipf-like popularity)"
    sub = sample_subgraph(full, ratio=SUBGRAPH_RATIO, seed=0, sampler="multi_rw")
    kg = sub.graph
    info = {"source": source, "subgraph": f"multi_rw, ratio {SUBGRAPH_RATIO}", "entities": kg.num_entities,
            "relations": kg.num_relations, "train": int(len(kg.train)), "valid": int(len(kg.valid)),
            "typed": kg.entity_types is not None}
    return kg.to_arrays(), info


# ------------------------------------------------------------------------------------------------- workers

def _message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _worker(index: int, device: str, graph_file: str, cfg: dict, barriers: dict, commands, results) -> None:
    """One trial slot: set up, report ready, then run the levels it is sent (None ends it)."""
    t0 = time.monotonic()
    setup_error = None
    cuda = device.startswith("cuda")
    try:
        import torch

        from kgtuner.data import FilterIndex, KnowledgeGraph
        from kgtuner.kge import Trainer, TrainConfig

        with np.load(graph_file) as arrays:
            kg = KnowledgeGraph.from_arrays(dict(arrays))
        fi = FilterIndex.from_graph(kg)
        torch.set_num_threads(1)
        # warm-up: CUDA context, cuBLAS, the allocator, the validation path (outside every window)
        Trainer(TrainConfig.from_dict({**cfg, "max_steps": 5, "valid_every": 5, "seed": 10 ** 6 + index}), kg,
                filter_index=fi, device=device).fit()
        if cuda:
            torch.cuda.synchronize()
    except BaseException as exc:  # noqa: BLE001 - recorded; this worker answers every level with it
        setup_error = f"start-up failed: {_message(exc)}"
    results.put({"type": "ready", "worker": index, "pid": os.getpid(), "setup_s": round(time.monotonic() - t0, 2),
                 "error": setup_error})
    while True:
        command = commands.get()
        if command is None:
            return
        k, window, threads = command
        rec = {"type": "level", "k": k, "worker": index, "trials": 0, "steps": 0, "triples": 0, "cut_trials": 0,
               "late_trials": 0, "other_trials": 0, "trial_s": [], "error": setup_error, "threads": threads}
        barrier = barriers[k]
        if setup_error is None:
            torch.set_num_threads(threads)
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
        try:
            barrier.wait(timeout=60)
            rec["barrier"] = "released"
        except Exception:  # noqa: BLE001 - broken (a worker of this level died) or timed out: go on alone
            rec["barrier"] = "broken: started unsynchronised"
        start = time.monotonic()
        deadline = start + window
        rec["start_monotonic"] = start
        n = 0
        if setup_error is None:
            try:
                while time.monotonic() < deadline:
                    t1 = time.monotonic()
                    trainer = Trainer(TrainConfig.from_dict({**cfg, "seed": 1000 * index + n}), kg, filter_index=fi,
                                      device=device, should_stop=lambda: time.monotonic() >= deadline)
                    n += 1
                    result = trainer.fit()
                    rec["steps"] += int(result.steps)
                    rec["triples"] += int(trainer.examples_seen)
                    t2 = time.monotonic()
                    if result.status == "ok" and t2 <= deadline:
                        rec["trials"] += 1
                        rec["trial_s"].append(round(t2 - t1, 3))
                    elif result.status == "ok":
                        rec["late_trials"] += 1  # its validation ended after the window
                    elif result.status == "stopped":
                        rec["cut_trials"] += 1  # the window ended inside it
                    else:
                        rec["other_trials"] += 1  # diverged: not a completed trial
                    del trainer, result
            except BaseException as exc:  # noqa: BLE001 - this worker failed; its completed trials still count
                rec["error"] = _message(exc)
                if cuda and isinstance(exc, torch.OutOfMemoryError):
                    torch.cuda.empty_cache()
            if cuda:
                torch.cuda.synchronize()
                rec["peak_mib"] = round(torch.cuda.max_memory_allocated() / 2 ** 20, 1)
                rec["peak_reserved_mib"] = round(torch.cuda.max_memory_reserved() / 2 ** 20, 1)
        rec["elapsed_s"] = round(time.monotonic() - start, 3)
        rec["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        results.put(rec)


# -------------------------------------------------------------------------------------------------- driver

def _gpu_mem_used() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        return out.replace("\n", ", ") or None
    except Exception:  # noqa: BLE001 - an info figure only
        return None


def summarise(record: dict) -> dict:
    """``best_k`` (the packed level, k > 1, with the most trials; ties: the smaller k), ``trials_k1``,
    ``trials_best`` and ``ratio`` from ``record["rows"]``."""
    rows = record["rows"]
    k1 = next((r for r in rows if r["k"] == 1), None)
    packed = [r for r in rows if r["k"] > 1]
    best = max(packed, key=lambda r: (r["trials"], -r["k"])) if packed else None
    record["trials_k1"] = k1["trials"] if k1 else None
    record["best_k"] = best["k"] if best else None
    record["trials_best"] = best["trials"] if best else None
    record["ratio"] = round(best["trials"] / k1["trials"], 3) if best and k1 and k1["trials"] else None
    return record


def print_table(record: dict) -> None:
    k1 = next((r for r in record["rows"] if r["k"] == 1), None)
    print(f"\nstage-1 trials in a {record['window_s']:.1f} s window ({record['trial_steps']} steps + 1 validation each; "
          f"batch {record['config']['batch_size']}, dim {record['config']['dim']}, {record['config']['negatives']} "
          f"negatives) on {record['device_name']}")
    print("| k | trials | trials/worker | steps | triples/s (aggregate) | x k=1 | peak MiB/process | failed |")
    print("|---:|---:|---|---:|---:|---:|---:|---|")
    for r in record["rows"]:
        per = ", ".join(str(w["trials"]) for w in r["workers"])
        rel = f"{r['triples_per_s'] / k1['triples_per_s']:.2f}" if k1 and k1["triples_per_s"] else "-"
        peak = f"{r['peak_mib_max']:.0f}" if r.get("peak_mib_max") is not None else "-"
        failed = "; ".join(f"w{w['worker']}: {w['error']}" for w in r["workers"] if w.get("error"))[:160] or "-"
        print(f"| {r['k']} | {r['trials']} | {per} | {r['steps']:,} | {r['triples_per_s']:,.0f} | {rel} | {peak} | {failed} |")
    if record.get("best_k") is not None:
        ratio = f"{record['ratio']:.2f}x" if record.get("ratio") is not None else "n/a"
        print(f"best packed level k={record['best_k']}: {record['trials_best']} trials vs {record['trials_k1']} at k=1 "
              f"({ratio})", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--ogb-root", type=Path, default=None, help="the synthetic ogbl-biokg of step data (20 %% subgraph)")
    ap.add_argument("--device", default="cuda", help="cuda | cuda:N | cpu")
    ap.add_argument("--window", type=float, default=12.0, help="seconds of each level's window")
    ap.add_argument("--levels", default="1,2,4,8", help="concurrent trials per level, comma-separated")
    ap.add_argument("--trial-steps", type=int, default=300, help="training steps of one trial")
    ap.add_argument("--valid-triples", type=int, default=500, help="valid triples ranked by a trial's validation")
    ap.add_argument("--budget", type=float, default=None, help="seconds this script may take: the window shrinks to fit")
    ap.add_argument("--entities", type=int, default=18_755, help="without --ogb-root: the random graph's entities")
    ap.add_argument("--train-triples", type=int, default=200_000, help="without --ogb-root: its train triples")
    ap.add_argument("--smoke", action="store_true", help="toy run: levels 1,2, a 3 s window, 20-step trials")
    args = ap.parse_args(argv)
    t_start = time.monotonic()
    if args.smoke:
        args.levels, args.window, args.trial_steps, args.valid_triples = "1,2", min(args.window, 3.0), 20, 50
        if args.ogb_root is None:
            args.entities, args.train_triples = 1000, 8000
    levels = sorted({int(x) for x in args.levels.split(",") if x.strip()})
    cuda = args.device.startswith("cuda")
    args.out.mkdir(parents=True, exist_ok=True)
    arrays, graph = build_graph(args)
    graph_file = args.out / "stage1_graph.npz"
    np.savez(graph_file, **arrays)
    cfg = {**TRIAL, **stage1_sizes(), "max_steps": args.trial_steps, "valid_every": args.trial_steps,
           "max_valid_triples": args.valid_triples, "device": args.device}
    cores = os.cpu_count() or 1
    device_name = "cpu"
    if cuda:  # the name from nvidia-smi: this process never touches CUDA (its workers own the device)
        try:
            device_name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                         text=True, timeout=10).stdout.strip().splitlines()[0]
        except Exception:  # noqa: BLE001
            device_name = args.device
    print(f"device: {device_name}; stage-1 graph: {graph['entities']:,} entities, {graph['relations']} relations, "
          f"{graph['train']:,} train, {graph['valid']:,} valid ({graph['subgraph']} of the {graph['source']})", flush=True)

    ctx = mp.get_context("spawn")
    barriers = {k: ctx.Barrier(k) for k in levels}
    results = ctx.Queue()
    n_workers = max(levels)
    commands = [ctx.Queue() for _ in range(n_workers)]
    procs = [ctx.Process(target=_worker, args=(i, args.device, str(graph_file), cfg, barriers, commands[i], results),
                         daemon=True) for i in range(n_workers)]
    for p in procs:
        p.start()
    ready: dict[int, dict] = {}
    # start-up may take what the levels do not need at their shortest window (and their ends, and 2 s to stop)
    tail_s = TAIL_S["cuda" if cuda else "cpu"]
    startup_limit = max(5.0, args.budget - len(levels) * (MIN_WINDOW_S + tail_s) - 2.0) if args.budget else 300.0
    while len(ready) < n_workers and time.monotonic() - t_start < startup_limit:
        try:
            msg = results.get(timeout=0.5)
            ready[msg["worker"]] = msg
        except queue.Empty:
            if all(not p.is_alive() for i, p in enumerate(procs) if i not in ready):
                break
    startup_s = time.monotonic() - t_start
    for i, p in enumerate(procs):
        if i not in ready:  # never used: its levels start without it (their barrier is aborted)
            ready[i] = {"worker": i, "error": f"not ready after {startup_s:.0f} s (exit code {p.exitcode})"}
            p.terminate()
            p.join(timeout=5)
    each = ", ".join(f"w{i} (pid {m.get('pid', '-')}) {m.get('setup_s', '-')} s" + (f" ({m['error']})" if m.get("error") else "")
                     for i, m in sorted(ready.items()))
    print(f"{n_workers} workers started in {startup_s:.1f} s (spawn, imports, {'CUDA context, ' if cuda else ''}"
          f"warm-up trial; outside every window): {each}", flush=True)

    window = args.window
    tail = TAIL_S["cuda" if cuda else "cpu"]
    if args.budget:
        left = args.budget - (time.monotonic() - t_start) - 2.0  # 2 s: writing and stopping the workers
        window = max(MIN_WINDOW_S, min(window, left / len(levels) - tail))
    record = {"device": args.device, "device_name": device_name, "window_s": window, "trial_steps": args.trial_steps,
              "valid_triples": args.valid_triples, "levels": levels, "config": cfg, "graph": graph,
              "cores": cores, "startup_s": round(startup_s, 1), "workers_setup": [ready[i] for i in range(n_workers)],
              "smoke": args.smoke, "rows": []}
    if window < args.window:
        print(f"window {window:.1f} s (asked {args.window:.1f} s): start-up plus {len(levels)} levels within "
              f"--budget {args.budget:.0f} s", flush=True)

    for k in levels:
        threads = 1 if not cuda else max(1, cores // k)
        members = list(range(k))
        dead = [i for i in members if not procs[i].is_alive()]
        got: dict[int, dict] = {}
        for i in members:
            if i in dead:
                got[i] = {"type": "level", "k": k, "worker": i, "trials": 0, "steps": 0, "triples": 0,
                          "error": ready[i].get("error") or f"process dead (exit code {procs[i].exitcode})"}
            else:
                commands[i].put((k, window, threads))
        if dead:
            barriers[k].abort()  # it cannot fill: the live workers start at once, unsynchronised
        sent = time.monotonic()
        mem_used = None
        limit = sent + window + (30 if cuda else 90)
        while len(got) < k and time.monotonic() < limit:
            if cuda and mem_used is None and time.monotonic() - sent >= window / 2:
                mem_used = _gpu_mem_used()
            try:
                msg = results.get(timeout=0.25)
            except queue.Empty:
                for i in members:
                    if i not in got and not procs[i].is_alive():
                        got[i] = {"type": "level", "k": k, "worker": i, "trials": 0, "steps": 0, "triples": 0,
                                  "error": f"process died during the level (exit code {procs[i].exitcode})"}
                        barriers[k].abort()
                continue
            if msg.get("type") == "level" and msg["k"] == k:
                got[msg["worker"]] = msg
        for i in members:
            if i not in got:  # stuck: stopped, so that the later levels go on without it
                got[i] = {"type": "level", "k": k, "worker": i, "trials": 0, "steps": 0, "triples": 0,
                          "error": f"no result within the window + {limit - sent - window:.0f} s (stopped)"}
                procs[i].terminate()
                procs[i].join(timeout=5)
        workers = [got[i] for i in members]
        starts = [w["start_monotonic"] for w in workers if "start_monotonic" in w]
        peaks = [w["peak_mib"] for w in workers if w.get("peak_mib") is not None]
        row = {"k": k, "trials": sum(w["trials"] for w in workers), "steps": sum(w["steps"] for w in workers),
               "triples": sum(w["triples"] for w in workers), "window_s": window, "threads_per_worker": threads,
               "failed_workers": sum(1 for w in workers if w.get("error")),
               "start_skew_ms": round((max(starts) - min(starts)) * 1e3, 1) if starts else None,
               "peak_mib_max": max(peaks) if peaks else None, "gpu_mem_used_mib": mem_used,
               "level_s": round(time.monotonic() - sent, 1), "workers": workers}
        row["triples_per_s"] = row["triples"] / window
        record["rows"].append(row)
        record["elapsed_s"] = round(time.monotonic() - t_start, 1)
        (args.out / "packing.json").write_text(json.dumps(summarise(record), indent=2))
        print(f"k={k}: {row['trials']} trials ({', '.join(str(w['trials']) for w in workers)}), {row['steps']:,} steps, "
              f"{row['triples_per_s']:,.0f} triples/s, start skew {row['start_skew_ms']} ms, level {row['level_s']} s"
              + (f", {row['failed_workers']} worker(s) failed" if row["failed_workers"] else ""), flush=True)

    for q in commands:
        q.put(None)
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.terminate()
    graph_file.unlink(missing_ok=True)
    record["elapsed_s"] = round(time.monotonic() - t_start, 1)
    (args.out / "packing.json").write_text(json.dumps(summarise(record), indent=2))
    print_table(record)
    print(f"packing step: {record['elapsed_s']:.1f} s (start-up {startup_s:.1f} s)", flush=True)
    # a failed worker is a figure (gpu_check_verify.py fails it); no level measured at all is this script's failure
    sys.exit(0 if record["rows"] else 1)


if __name__ == "__main__":
    main()
