"""Last step of scripts/gpu/gpu_check.sh: read what every step left in OUT, check each figure against its
target, and write the one-screen verdict ``OUT/summary.txt`` (and ``OUT/summary.json``).

    python scripts/gpu/gpu_check_verify.py OUT [--limit 480] [--smoke 0|1]

Each step gets one line ``STEP  PASS|FAIL|N/A  seconds`` and its figures below it, each ``[PASS]``,
``[FAIL]``, ``[N/A ]`` (a GPU target on a CPU run, never a PASS) or ``[info]`` (measured, no target). A
step FAILs when its command failed or timed out or one of its figures failed. Exit status 1 when any step
failed. Targets:

* engine: the main configuration with its whole step replayed from one CUDA graph (``new, cuda_graph: true``,
  ``train.cuda_graph``) >= 1,000,000 training triples/s on CUDA; no host-device synchronisation inside the
  eager row step nor the captured step;
* models (run last, in the time the other steps left): every model of ``bench_gpu.py --models table``
  trained at its paper dimension (no out-of-memory), all 24 configurations measured, except that the
  slow rows the plan puts last (TransE/RotatE with 1VsAll/kVsAll, seconds a step) may be left unstarted
  when the step's time is spent (named in an info line);
* learn: the device run's best validation MRR >= max(2 x random, random + 0.05) (random: the expected
  MRR of a random scorer against the OGB candidates); at every validation the CPU runs also made, the
  device run's MRR within ``max(0.005, 4.9 sigma)`` of the mean of the two CPU seeds, where ``sigma``
  is one run's seed-to-seed standard deviation estimated from the two CPU seeds (pooled over the
  validations: ``sigma^2 = mean(d^2) / 2``, ``d`` = seed 0 - seed 1); the device run draws other random
  numbers (torch's CUDA generator), so ``device - mean(cpu)`` has sd ``sqrt(1.5) sigma``: 4.9 sigma
  is 4 of those standard deviations; the ``graph`` run (``train.cuda_graph=true``) and the ``tf32`` run
  (with ``train.tf32=true`` too) within that tolerance of the eager device run at every common validation
  (on CPU, smoke: the static step draws what the eager step draws, so within 0.005);
* oom: the in-process ``kgtuner.train.run`` raises kgtuner's one-line error naming the out-of-memory and the
  sizes at fault (``KGTunerError: out of memory training ...``; a bare ``torch.OutOfMemoryError`` also
  passes); ``memory_allocated()`` back within 32 MiB of the baseline;
  the next run ends ok; the CLI exits non-zero (not by a signal) naming the error;
* packing (``gpu_check_packing.py``): the best packed level (k > 1 stage-1 trials at once on the one GPU)
  completes more stage-1 trials in the window than k = 1 (the figures: trials, aggregate triples/s and peak
  memory per level, the ratio best / k=1); every worker ran without an error. On a smoke run (CPU) the
  trials are recorded and the target is N/A (a loaded 2-core CPU gains nothing from packing);
* launch: exit 0 and ``status: ok``; stage 1 and stage 2 trials; every trial on a GPU (``gpu`` not null,
  not ``cpu``); the injected failure (trial 1) recorded as failed and a trial started after it and
  finished on the same card; the answer's ``embeddings.npz`` scored independently (numpy float64 ComplEx
  scores of the OGB candidates read from the split files, ranked by ``ogb``'s ``Evaluator``) within
  1e-3 of ``summary.json``'s test MRR (float32 on the card vs float64 here: a tie broken differently
  moves the MRR by ~1e-4); the card's memory back within 512 MiB of its value before the launch.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
from pathlib import Path

import numpy as np

STEPS = ("env", "data", "engine", "learn", "oom", "packing", "launch", "models")
MODEL_CONFIGS = 24  # 8 models x (sampled, 1VsAll, kVsAll)
TARGET_TPS = 1_000_000
#: the engine's run held to TARGET_TPS: the main configuration with its whole step replayed from one CUDA graph
TARGET_RUN = "new, cuda_graph: true"


class Step:
    def __init__(self, name: str, rc: int | None, seconds: int | None, timeout: int | None):
        self.name, self.rc, self.seconds, self.timeout = name, rc, seconds, timeout
        self.figures: list[tuple[str, str]] = []
        self.data: dict = {}  # the step's figures as numbers, in summary.json (packing)

    def add(self, result: str, text: str) -> None:
        self.figures.append((result, text))

    def check(self, ok: bool, text: str) -> None:
        self.add("PASS" if ok else "FAIL", text)

    @property
    def result(self) -> str:
        if self.rc is None:
            return "FAIL"
        if self.rc != 0 or any(r == "FAIL" for r, _ in self.figures):
            return "FAIL"
        if self.figures and all(r in ("N/A", "info") for r, _ in self.figures):
            return "N/A" if any(r == "N/A" for r, _ in self.figures) else "PASS"
        return "PASS"


def _steps(out: Path) -> dict[str, Step]:
    rows = {}
    path = out / "steps.tsv"
    if path.is_file():
        for line in path.read_text().splitlines()[1:]:
            name, rc, sec, tmo = line.split("\t")
            rows[name] = Step(name, int(rc), int(sec), int(tmo))
    return {name: rows.get(name, Step(name, None, None, None)) for name in STEPS}


def _json(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def _rc_note(step: Step) -> None:
    if step.rc is None:
        step.add("FAIL", "did not run")
    elif step.rc in (124, 137):
        step.add("FAIL", f"timed out after {step.timeout} s")
    elif step.rc != 0:
        step.add("FAIL", f"exit status {step.rc} (see {step.name}/{step.name}.log)")


# ------------------------------------------------------------------------------------------------ env

def check_env(out: Path, step: Step, smoke: bool) -> dict:
    env = _json(out / "env" / "env.json") or {}
    smi = (out / "env" / "nvidia-smi.txt").read_text().strip() if (out / "env" / "nvidia-smi.txt").is_file() else ""
    commit = (out / "env" / "git-commit.txt").read_text().strip() if (out / "env" / "git-commit.txt").is_file() else "?"
    status = (out / "env" / "git-status.txt").read_text().splitlines() if (out / "env" / "git-status.txt").is_file() else []
    if env:
        step.add("info", f"torch {env['torch']}, CUDA {env['cuda']}, Ray {env['ray']}, ogb {env['ogb']}, "
                         f"python {env['python']}, {env['cpus']} CPUs")
        step.add("info", f"commit {commit[:12]}, {len(status)} changed/untracked files (git status --short)")
    if smoke:
        step.add("N/A", f"nvidia-smi: {'absent' if smi in ('', 'absent') else 'present'} (smoke run: CPU only)")
    else:
        step.check(smi not in ("", "absent"), f"nvidia-smi: {'present' if smi not in ('', 'absent') else 'absent'}")
        step.check(bool(env.get("cuda_available")), f"torch.cuda.is_available(): {env.get('cuda_available')}; "
                                                     f"devices {env.get('devices')}")
    return env


# ------------------------------------------------------------------------------------------------ data

def check_data(out: Path, step: Step) -> dict | None:
    stats = _json(out / "data" / "ogb" / "ogbl_biokg" / "synthetic.json")
    if stats is None:
        step.add("FAIL", "no data set written")
        return None
    log = out / "data" / "data.log"
    loaded = re.search(r"^loaded: (.+)$", log.read_text(errors="replace"), re.M) if log.is_file() else None
    step.check(loaded is not None, f"read back by ogb's loader through kgtuner.data: {loaded.group(1) if loaded else 'no'}")
    step.add("info", f"synthetic ogbl-biokg: {stats['entities']:,} entities, {stats['relations']} relations, "
                     f"{stats['train']:,}/{stats['valid']:,}/{stats['test']:,} train/valid/test, "
                     f"{stats['candidates']} candidates, random MRR {stats['random_mrr']:.4f}")
    return stats


# ---------------------------------------------------------------------------------------------- engine

def _engine_table(text: str) -> dict[str, float]:
    """The main table's training rows: label -> triples/s (also when the model table timed out)."""
    rows = {}
    for m in re.finditer(r"^\| train triples/s, (.+?) \| ([\d,]+) \|", text, re.M):
        rows[m.group(1)] = float(m.group(2).replace(",", ""))
    return rows


def _json_line(log: Path, copy_to: Path) -> tuple[str, dict | None]:
    """A bench_gpu.py log's text and its last line's JSON (None: killed before it), copied to ``copy_to``."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    data = None
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line.replace("NaN", "null"))
            except json.JSONDecodeError:
                data = None
            break
    if data is not None:
        copy_to.write_text(json.dumps(data, indent=2))
    return text, data


def check_engine(out: Path, step: Step, smoke: bool) -> None:
    text, data = _json_line(out / "engine" / "engine.log", out / "engine" / "bench_gpu.json")
    device = re.search(r"^device: (.+)$", text, re.M)
    if device:
        step.add("info", f"bench_gpu.py on {device.group(1)}")
    runs = {k: v["triples_per_s"] for k, v in data["runs"].items()} if data else _engine_table(text)
    new = runs.get(TARGET_RUN)
    main = "main config (toy: ComplEx d16, batch 64, 8 neg.)" if smoke else "main config (ComplEx d2000, batch 1024, 512 neg.)"
    if new is None:
        step.add("FAIL", f"main configuration: no '{TARGET_RUN}' figure in engine/engine.log")
    elif smoke:
        step.add("N/A", f"{main}, {TARGET_RUN}: {new:,.0f} triples/s; target >= {TARGET_TPS:,} on H100/H200 "
                        "(CPU toy run: not applicable)")
    else:
        step.check(new >= TARGET_TPS, f"{main}, {TARGET_RUN}: {new:,.0f} triples/s (target >= {TARGET_TPS:,})")
    old = runs.get("old (first engine)")
    if old:
        step.add("info", f"old (first engine): {old:,.0f} triples/s" + (f"; {TARGET_RUN} {new / old:.2f}x old" if new else ""))
    for label, tps in runs.items():
        if label not in (TARGET_RUN, "old (first engine)"):
            step.add("info", f"{label}: {tps:,.0f} triples/s" + (f" ({tps / old:.2f}x old)" if old else ""))
    if data is None:
        step.add("FAIL", "no JSON line from bench_gpu.py (timed out or failed before its end)")
        return
    for label in ("new (row step)", TARGET_RUN):
        r = data["runs"].get(label, {})
        syncs = str(r.get("host_syncs_in_step"))
        if smoke:
            step.add("N/A", f"host syncs in 5 steps of {label}: {syncs}")
            continue
        step.check(syncs == "none", f"host syncs in 5 steps of {label}: {syncs} (target: none)")
        if r.get("peak_gib") is not None and r.get("step_ms") is not None:
            step.add("info", f"peak GPU memory, {label}: {r['peak_gib']:.2f} GiB; step {r['step_ms']:.3f} ms = "
                             f"{r['step_ms'] / (data['roofline_s'] * 1e3):.1f}x its roofline")
    note = data["runs"].get(TARGET_RUN, {}).get("step_note")
    if note:
        step.add("info", note)
    step.add("info", f"filtered eval: {data['eval_s']:.3f} s = {data['eval_s'] / data['eval_floor_s']:.1f}x its GEMM floor")


def _slow_row(row: dict) -> bool:
    """A row bench_gpu.model_plan runs last on a small step budget (a distance model with 1VsAll/kVsAll)."""
    return row.get("model") in ("transe", "rotate") and row.get("negatives") in ("1VsAll", "kVsAll")


def _row_name(row: dict) -> str:
    return f"{row['model']}/{row['negatives']}"


def check_models(out: Path, step: Step, smoke: bool) -> None:
    text, data = _json_line(out / "models" / "models.log", out / "models" / "models.json")
    if data is None:
        done = len(re.findall(r"^\| (?!model \|)[a-z0-9_]+ \| \d+ \|", text, re.M))
        step.add("FAIL", f"no JSON line from bench_gpu.py --models table: {done}/{MODEL_CONFIGS} configurations "
                         "measured before it stopped (see models/models.log)")
        return
    models = data.get("models") or []
    bad = [f"{m['model']}/{m['negatives']}: {m['error']}" for m in models if "error" in m]
    skipped = [m for m in models if "skipped" in m]
    late = [m for m in skipped if not _slow_row(m)]  # a row the plan puts before the slow ones was not reached
    trained = len(models) - len(bad) - len(skipped)
    step.check(len(models) == MODEL_CONFIGS and not bad and not late,
               f"every model at its paper dim: {trained}/{MODEL_CONFIGS} configurations trained"
               + (f"; {'; '.join(bad)[:200]}" if bad else "")
               + (f"; not reached: {', '.join(map(_row_name, late))}" if late else ""))
    if skipped and not late:
        step.add("info", f"{len(skipped)} slow configuration(s) not started in the step's time (distance models with "
                         f"1VsAll/kVsAll at the paper's dimension train in chunks at seconds a step, and run last): "
                         + ", ".join(map(_row_name, skipped)))
    measured = [m for m in models if "triples_per_s" in m]
    if measured and not bad:
        slow = min(measured, key=lambda m: m["triples_per_s"])
        step.add("info", f"slowest: {slow['model']} d{slow['dim']} {slow['negatives']}: "
                         f"{slow['triples_per_s']:,.0f} triples/s")


# ----------------------------------------------------------------------------------------------- learn

def learn_tolerance(cpu0: list[float], cpu1: list[float]) -> tuple[float, float]:
    """(sigma, tolerance): one run's seed-to-seed sd from two seeds' MRR at the same validations, and the
    bound on |device - mean(cpu0, cpu1)| (4 sd of that difference, at least 0.005)."""
    d = np.asarray(cpu0) - np.asarray(cpu1)
    sigma = float(np.sqrt(np.mean(d ** 2) / 2)) if len(d) else math.nan
    return sigma, max(0.005, 4.9 * sigma) if len(d) else math.nan


def check_learn(out: Path, step: Step, smoke: bool) -> None:
    rec = _json(out / "learn" / "learn.json")
    if rec is None:
        step.add("FAIL", "no learn/learn.json")
        return
    runs, rnd = rec["runs"], rec["random_mrr"]
    for name, r in runs.items():
        if r["rc"] != 0:
            step.add("FAIL", f"run {name} exit status {r['rc']} (learn/{name}/train.log)")
    dev = runs["device"]
    target = max(2 * rnd, rnd + 0.05)
    best = max(dev["valid_mrr"]) if dev["valid_mrr"] else math.nan
    step.check(best >= target, f"{rec['device']} run: best valid MRR {best:.4f} after {dev['steps'][-1] if dev['steps'] else 0} "
                               f"steps (target >= {target:.4f}; random {rnd:.4f})")
    if dev.get("test"):
        step.add("info", f"{rec['device']} run: test MRR {dev['test']['mrr']:.4f}, "
                         f"{dev.get('triples_per_second') or 0:,.0f} triples/s, {dev['wall_s']} s")
    c0, c1 = runs["cpu0"], runs["cpu1"]
    common = [s for s in c0["steps"] if s in c1["steps"] and s in dev["steps"]]
    at = lambda r, s: r["valid_mrr"][r["steps"].index(s)]  # noqa: E731
    sigma, tol = learn_tolerance([at(c0, s) for s in common], [at(c1, s) for s in common])
    diffs = [abs(at(dev, s) - (at(c0, s) + at(c1, s)) / 2) for s in common]
    table = ", ".join(f"{s}: {at(dev, s):.4f} vs {at(c0, s):.4f}/{at(c1, s):.4f}" for s in common)
    text = (f"{rec['device']} vs CPU seeds 0/1 at equal steps (step: device vs cpu0/cpu1) {table}; "
            f"max |device - cpu mean| {max(diffs) if diffs else math.nan:.4f}, tolerance {tol:.4f} "
            f"(4.9 x seed sd {sigma:.4f}, at least 0.005)")
    if smoke:
        step.add("N/A", text + " -- CPU run: the device run is CPU seed 0")
    else:
        step.check(len(common) >= 2 and max(diffs) <= tol, text)
    check_learn_variants(runs, dev, tol, smoke, step)


#: learn.json's runs of the device configuration with another step: the whole step replayed from one CUDA graph,
#: and that with TF32 products (scripts/gpu/gpu_check_learn.py)
LEARN_VARIANTS = {"graph": "train.cuda_graph=true", "tf32": "train.cuda_graph=true train.tf32=true"}


def check_learn_variants(runs: dict, dev: dict, tol: float, smoke: bool, step: Step) -> None:
    """Each variant learns as the eager device run at equal steps: within the seed-noise tolerance on a GPU (other
    random draws); on CPU (smoke) the static step draws what the eager step draws, so within 0.005."""
    for name, overrides in LEARN_VARIANTS.items():
        run = runs.get(name)
        if run is None:
            if not smoke or name == "graph":
                step.add("FAIL", f"no '{name}' run ({overrides}) in learn/learn.json")
            continue
        common = [s for s in run["steps"] if s in dev["steps"]]
        diffs = [abs(run["valid_mrr"][run["steps"].index(s)] - dev["valid_mrr"][dev["steps"].index(s)]) for s in common]
        bound = 0.005 if smoke else tol
        worst = max(diffs) if diffs else math.nan
        tps = run.get("triples_per_second") or 0
        step.check(len(common) >= 2 and worst <= bound,
                   f"{overrides}: max |MRR - eager device run| over {len(common)} equal-step validations {worst:.4f} "
                   f"(bound {bound:.4f}); {tps:,.0f} triples/s against the eager run's "
                   f"{dev.get('triples_per_second') or 0:,.0f}")


# ------------------------------------------------------------------------------------------------- oom

def check_oom(out: Path, step: Step, smoke: bool) -> None:
    rec = _json(out / "oom" / "oom.json")
    if rec is None:
        step.add("FAIL", "no oom/oom.json")
        return
    step.check(rec.get("before", {}).get("status") == "ok", f"small run before: {rec.get('before', {}).get('status')}")
    if smoke or "oom" not in rec:
        step.add("N/A", "forced CUDA out-of-memory: no CUDA device (smoke run)")
    else:
        o = rec["oom"]
        message = o.get("message", "")
        named = o.get("raised") == "OutOfMemoryError" or (
            o.get("raised") == "KGTunerError" and message.startswith("out of memory") and "train.dim=" in message)
        step.check(named, f"kgtuner.train dim {rec['oom_dim']:,}, batch {rec['oom_batch']:,}: raised {o.get('raised')} "
                          f"({message[:120]})")
        base, after = rec["baseline_bytes"], rec["after_oom_bytes"]
        step.check(after - base <= 32 * 2 ** 20,
                   f"memory_allocated after the OOM {after / 2**20:.1f} MiB vs baseline {base / 2**20:.1f} MiB "
                   f"(before gc {rec['after_oom_before_gc_bytes'] / 2**20:.1f} MiB; target: within 32 MiB)")
        cli = rec.get("cli", {})
        rc = cli.get("rc")
        step.check(isinstance(rc, int) and 0 < rc < 128 and cli.get("names_oom"),
                   f"python -m kgtuner.train with that config: exit {rc}, names the OOM: {cli.get('names_oom')} "
                   f"(last line: {cli.get('last_line', '')[:80]})")
    step.check(rec.get("after", {}).get("status") == "ok", f"next run after it: {rec.get('after', {}).get('status')}")


# --------------------------------------------------------------------------------------------- packing

def packing_verdict(rec: dict) -> dict:
    """The packing target on ``packing.json``'s rows: the best packed level (k > 1, the most trials; ties: the
    smaller k) completes more stage-1 trials in the window than k = 1. Returns ``ok`` (None when k = 1 or every
    packed level is missing), ``text``, ``best_k``, ``trials_k1``, ``trials_best``, ``ratio``."""
    rows = {r["k"]: r for r in rec.get("rows", [])}
    packed = [r for k, r in rows.items() if k > 1]
    if 1 not in rows or not packed:
        return {"ok": None, "text": f"levels measured {sorted(rows)}: k=1 and a packed level (k > 1) are both needed",
                "best_k": None, "trials_k1": rows[1]["trials"] if 1 in rows else None, "trials_best": None,
                "ratio": None}
    k1 = rows[1]
    best = max(packed, key=lambda r: (r["trials"], -r["k"]))
    ratio = round(best["trials"] / k1["trials"], 3) if k1["trials"] else None
    text = (f"best packed level k={best['k']}: {best['trials']} stage-1 trials in the {rec.get('window_s', 0):.1f} s "
            f"window vs {k1['trials']} at k=1 ({f'{ratio:.2f}x' if ratio is not None else 'n/a'}; target: more than k=1)")
    return {"ok": best["trials"] > k1["trials"], "text": text, "best_k": best["k"], "trials_k1": k1["trials"],
            "trials_best": best["trials"], "ratio": ratio}


def check_packing(out: Path, step: Step, smoke: bool) -> None:
    rec = _json(out / "packing" / "packing.json")
    if rec is None:
        step.add("FAIL", "no packing/packing.json")
        return
    cfg = rec.get("config", {})
    graph = rec.get("graph", {})
    step.add("info", f"stage-1 trial: {cfg.get('model')} batch {cfg.get('batch_size')}, dim {cfg.get('dim')}, "
                     f"{cfg.get('negatives')} negatives, {rec.get('trial_steps')} steps + 1 validation, on "
                     f"{graph.get('entities', 0):,} entities / {graph.get('train', 0):,} train triples "
                     f"({graph.get('subgraph')}); {rec.get('device_name')}; workers' start-up {rec.get('startup_s')} s "
                     "outside the windows")
    rows = rec.get("rows", [])
    k1 = next((r for r in rows if r["k"] == 1), None)
    for r in rows:
        rel = f" ({r['triples_per_s'] / k1['triples_per_s']:.2f}x k=1)" if k1 and k1["triples_per_s"] else ""
        peak = f", peak {r['peak_mib_max']:,.0f} MiB/process" if r.get("peak_mib_max") is not None else ""
        step.add("info", f"k={r['k']}: {r['trials']} trials ({', '.join(str(w['trials']) for w in r['workers'])}), "
                         f"{r['triples_per_s']:,.0f} triples/s aggregate{rel}{peak}")
    failed = [f"k={r['k']} worker {w['worker']}: {w['error']}" for r in rows for w in r["workers"] if w.get("error")]
    step.check(not failed, "every worker ran" + (f": no; {'; '.join(failed)}"[:300] if failed else ""))
    verdict = packing_verdict(rec)
    step.data = {"window_s": rec.get("window_s"), "trial_steps": rec.get("trial_steps"),
                 **{k: verdict[k] for k in ("best_k", "trials_k1", "trials_best", "ratio")},
                 "target_met": verdict["ok"],
                 "levels": [{"k": r["k"], "trials": r["trials"], "steps": r["steps"],
                             "triples_per_s": round(r["triples_per_s"], 1), "peak_mib_max": r.get("peak_mib_max"),
                             "failed_workers": r.get("failed_workers", 0)} for r in rows]}
    if smoke:
        step.add("N/A", verdict["text"] + " -- CPU smoke run: the target is the GPU's")
    elif verdict["ok"] is None:
        step.add("FAIL", verdict["text"])
    else:
        step.check(verdict["ok"], verdict["text"])


# ---------------------------------------------------------------------------------------------- launch

def _read_gz_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt") as fh:
        return [ln.strip() for ln in fh if ln.strip()]


def independent_test_mrr(run_dir: Path, folder: Path) -> tuple[float, int]:
    """Test MRR of the run's ``embeddings.npz`` (ComplEx) under the OGB protocol, computed without kgtuner:
    the test triples and candidates from ``split/random/test.pt`` and the relation names from
    ``raw/triplet-type-list.csv.gz``, entities by name (``type:local id``), float64 scores, ogb's
    Evaluator on each side, head and tail lists averaged together. Returns (MRR, queries).
    (Candidates and true entity are columns of one score matrix, so equal entities tie exactly.)"""
    import torch
    from ogb.linkproppred import Evaluator

    arrays = np.load(run_dir / "embeddings.npz")
    ent = {n: i for i, n in enumerate(arrays["entity_names"].tolist())}
    rel = {n: i for i, n in enumerate(arrays["relation_names"].tolist())}
    rel_names = [ln.split(",")[1] for ln in _read_gz_lines(folder / "raw" / "triplet-type-list.csv.gz")]
    test = torch.load(folder / "split" / "random" / "test.pt", weights_only=False)
    n_rel = len(rel)
    half = arrays["entity"].shape[1] // 2
    E = arrays["entity"][:, :half].astype(np.float64) + 1j * arrays["entity"][:, half:].astype(np.float64)
    R = arrays["relation"][:, :half].astype(np.float64) + 1j * arrays["relation"][:, half:].astype(np.float64)
    inverse = R.shape[0] == 2 * n_rel

    def ids(types, local):
        return np.array([ent[f"{t}:{int(i)}"] for t, i in zip(types, local)])

    h, t = ids(test["head_type"], test["head"]), ids(test["tail_type"], test["tail"])
    r = np.array([rel[rel_names[int(i)]] for i in test["relation"]])
    hn = np.stack([ids([ty] * test["head_neg"].shape[1], row) for ty, row in zip(test["head_type"], test["head_neg"])])
    tn = np.stack([ids([ty] * test["tail_neg"].shape[1], row) for ty, row in zip(test["tail_type"], test["tail_neg"])])
    Er_T, Ei_T = np.ascontiguousarray(E.real.T), np.ascontiguousarray(E.imag.T)
    evaluator = Evaluator("ogbl-biokg")
    lists = []
    for side in ("tail", "head"):
        pos, neg = [], []
        for s in range(0, len(h), 256):
            sl = slice(s, s + 256)
            if side == "tail":  # (h, r, ?): Re(<h, r, conj(x)>)
                true, cand, q = t[sl], tn[sl], E[h[sl]] * R[r[sl]]
            elif inverse:  # (?, r, t) scored as (t, r + R, ?)
                true, cand, q = h[sl], hn[sl], E[t[sl]] * R[r[sl] + n_rel]
            else:  # Re(<x, r, conj(t)>) = Re(<conj(x), conj(r), t>)
                true, cand, q = h[sl], hn[sl], np.conj(R[r[sl]]) * E[t[sl]]
            # every entity's score (one float64 product), then the true entity's and its candidates' columns
            scores = q.real @ Er_T + q.imag @ Ei_T
            rows = np.arange(len(true))
            pos.append(scores[rows, true])
            neg.append(scores[rows[:, None], cand])
        res = evaluator.eval({"y_pred_pos": torch.from_numpy(np.concatenate(pos)),
                              "y_pred_neg": torch.from_numpy(np.concatenate(neg))})
        lists.append(res["mrr_list"].double().numpy())
    ranks = np.concatenate(lists)
    return float(ranks.mean()), len(ranks)


def _gpu_mem(path: Path) -> dict[str, float]:
    if not path.is_file():
        return {}
    return {ln.split(",")[0].strip(): float(ln.split(",")[-1]) for ln in path.read_text().splitlines() if ln.strip()}


def check_launch(out: Path, step: Step, smoke: bool, stats: dict | None) -> None:
    import pandas as pd

    run = out / "launch" / "run"
    budget = (out / "launch_budget.txt").read_text().strip() if (out / "launch_budget.txt").is_file() else "?"
    summary = _json(run / "summary.json")
    if summary is None or not (run / "trials.parquet").is_file():
        step.add("FAIL", "no summary.json / trials.parquet in launch/run")
        return
    step.check(summary.get("status") == "ok", f"summary.json status: {summary.get('status')} {summary.get('error') or ''}".strip())
    used = (summary.get("budget") or {}).get("used_s")
    step.add("info", f"budget.seconds={budget}" + (f", used {used:.0f} s" if isinstance(used, (int, float)) else "")
             + f"; cluster {summary.get('cluster', {}).get('slots')} trial slot(s)")
    df = pd.read_parquet(run / "trials.parquet")
    n1, n2 = int((df.stage == 1).sum()), int((df.stage == 2).sum())
    step.check(n1 >= 1 and n2 >= 1, f"two stages: {n1} stage-1 and {n2} stage-2 trials")
    gpus = sorted(set(df["gpu"].astype(str)))
    on_gpu = df["gpu"].notna().all() and not (df["gpu"].astype(str) == "cpu").any()
    if smoke:
        step.add("N/A", f"trials on a GPU: gpu column {gpus} (smoke run: CPU trial slots)")
    else:
        step.check(bool(on_gpu), f"every trial placed on a GPU: gpu column values {gpus}")
    failed = df[df.trial_index == 1]
    ok_fail = len(failed) == 1 and failed.status.iloc[0] == "failed" and "injected failure" in str(failed.error.iloc[0])
    later = pd.DataFrame()
    if len(failed):
        f = failed.iloc[0]
        later = df[(df.start_s >= f.end_s) & df.status.isin(["ok", "stopped"])]
        if not smoke:
            later = later[later.gpu.astype(str) == str(f.gpu)]
    step.check(ok_fail and len(later) > 0,
               f"trial 1 (trial.inject_failures=[1]) recorded {failed.status.tolist()}; {len(later)} trial(s) "
               f"started after it ended and finished" + ("" if smoke else " on the same GPU"))
    best = (summary.get("best") or {})
    test = (best.get("test") or {}).get("mrr")
    if not (run / "embeddings.npz").is_file() or test is None:
        step.add("FAIL", f"answer: embeddings.npz {'present' if (run / 'embeddings.npz').is_file() else 'absent'}, "
                         f"summary test MRR {test}")
    elif summary.get("model") not in (None, "complex") and not str(summary.get("model")).startswith("complex"):
        step.add("N/A", f"independent evaluation written for ComplEx only (model {summary.get('model')})")
    else:
        mrr, n = independent_test_mrr(run, out / "data" / "ogb" / "ogbl_biokg")
        step.check(abs(mrr - test) <= 1e-3,
                   f"answer (trial {best.get('trial_id')}, stage {best.get('stage')}): embeddings.npz scored "
                   f"independently: test MRR {mrr:.5f} over {n} queries vs summary.json {test:.5f} (|diff| <= 1e-3)")
        if stats:
            step.add("info", f"answer's test MRR {test:.4f} vs random {stats['random_mrr']:.4f}")
    before, after = _gpu_mem(out / "launch" / "gpu_mem_before.csv"), _gpu_mem(out / "launch" / "gpu_mem_after.csv")
    if smoke:
        step.add("N/A", "GPU memory after the launch: no GPU")
    else:
        peak = 0.0
        during = out / "launch" / "gpu_mem_during.csv"
        if during.is_file():
            vals = [float(ln.split(",")[-1]) for ln in during.read_text().splitlines() if ln.strip()]
            peak = max(vals, default=0.0)
        step.check(bool(before) and bool(after) and all(after.get(k, math.inf) - v <= 512 for k, v in before.items()),
                   f"GPU memory used (nvidia-smi, MiB) before {before}, peak {peak:.0f}, after {after} "
                   f"(target: back within 512 MiB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--limit", type=int, default=480)
    ap.add_argument("--smoke", type=int, default=0)
    args = ap.parse_args()
    out, smoke = args.out, bool(args.smoke)
    steps = _steps(out)
    for step in steps.values():
        _rc_note(step)
    env = {}
    checks = {"env": lambda s: check_env(out, s, smoke), "data": lambda s: check_data(out, s),
              "engine": lambda s: check_engine(out, s, smoke), "learn": lambda s: check_learn(out, s, smoke),
              "oom": lambda s: check_oom(out, s, smoke), "packing": lambda s: check_packing(out, s, smoke),
              "models": lambda s: check_models(out, s, smoke)}
    results = {}
    for name, fn in checks.items():
        try:
            results[name] = fn(steps[name])
        except Exception as exc:  # noqa: BLE001 - a broken output is this step's failure, not the summary's
            steps[name].add("FAIL", f"could not check: {type(exc).__name__}: {exc}"[:200])
    env = results.get("env") or {}
    try:
        check_launch(out, steps["launch"], smoke, results.get("data"))
    except Exception as exc:  # noqa: BLE001
        steps["launch"].add("FAIL", f"could not check: {type(exc).__name__}: {exc}"[:200])
    elapsed = int((out / "elapsed_before_verify.txt").read_text()) if (out / "elapsed_before_verify.txt").is_file() else -1
    commit = (out / "env" / "git-commit.txt").read_text().strip() if (out / "env" / "git-commit.txt").is_file() else "?"
    device = ", ".join(env.get("devices") or []) or "cpu"
    lines = [f"kgtuner GPU check (scripts/gpu/gpu_check.sh{' --smoke' if smoke else ''}): {device}; "
             f"torch {env.get('torch')}, CUDA {env.get('cuda')}, Ray {env.get('ray')}; commit {commit[:12]}",
             f"steps took {elapsed} s before this summary (limit {args.limit} s)"]
    for step in steps.values():
        sec = f"{step.seconds} s" if step.seconds is not None else "-"
        lines.append(f"{step.name:7s} {step.result:4s}  {sec:>6s}")
        lines += [f"    [{r:4s}] {text}" for r, text in step.figures]
    verdict = "FAIL" if any(s.result == "FAIL" for s in steps.values()) else "PASS"
    lines.append(f"overall: {verdict}" + (" (smoke run on CPU: GPU targets are N/A)" if smoke else ""))
    text = "\n".join(lines) + "\n"
    (out / "summary.txt").write_text(text)
    (out / "summary.json").write_text(json.dumps(
        {"overall": verdict, "smoke": smoke, "elapsed_s": elapsed, "limit_s": args.limit,
         "steps": {s.name: {"result": s.result, "rc": s.rc, "seconds": s.seconds,
                            "figures": [{"result": r, "text": t} for r, t in s.figures],
                            **({"data": s.data} if s.data else {})} for s in steps.values()}},
        indent=2))
    print(text, end="")
    raise SystemExit(0 if verdict == "PASS" else 1)


if __name__ == "__main__":
    main()
