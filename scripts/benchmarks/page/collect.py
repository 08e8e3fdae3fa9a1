"""``--collect``: the benchmark outputs that exist on this machine become data files under ``docs/benchmarks/``
(per live suite its results, curves and per-search facts; the importances; the SRCC ablations' runs) and
``provenance.json`` (the command, commit and scale each came from)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from .common import REPO, SUITE_COMMANDS, SUITES, load_provenance


SEARCH_COLUMNS = ["dataset", "model", "algorithm", "seed", "load_1min", "inverse", "optimizer", "entities",
                  "stage1_trials", "stage2_trials", "stage2_finished", "stage2_start", "switch_wait_s", "best_stage1",
                  "best_stage2", "from_subgraph", "stage_srcc", "stage_n"]


def machine() -> str:
    """This machine in one line (``kgtuner.bench.record.machine_info``, plus Ray's and scikit-learn's versions)."""
    import ray
    import sklearn

    from kgtuner.bench.record import machine_info

    m = machine_info()
    mem = f", {m['memory_gib']:.0f} GiB RAM" if m["memory_gib"] is not None else ""
    return (f"{m['cores']} cores ({m['cpu'] or 'unknown CPU'}){mem}, {m['os']}; Python {m['python']}, torch "
            f"{m['torch']}, Ray {ray.__version__}, scikit-learn {sklearn.__version__}")


def _cell_parts(run: Path) -> tuple[str, str, str, str]:
    dataset, model, algorithm, seed = run.name.split("__")
    return dataset, model, algorithm, seed


def _entities(data_root: Path, dataset: str) -> int | None:
    names: set[str] = set()
    try:
        for split in ("train", "valid", "test"):
            for line in (data_root / dataset / f"{split}.txt").read_text().splitlines():
                h, _, t = line.split("\t")
                names.update((h, t))
    except (OSError, ValueError):
        return None
    return len(names)


def search_facts(out: Path, data_root: Path) -> pd.DataFrame:
    """One row per search (cell) of a bench_search.py output: :data:`SEARCH_COLUMNS`."""
    from kgtuner.analysis import stage_consistency

    rows, entities = [], {}
    for cell_json in sorted((out / "cells").glob("*/cell.json")):
        run = cell_json.parent
        dataset, model, algorithm, seed = _cell_parts(run)
        cell = json.loads(cell_json.read_text())
        if dataset not in entities:
            entities[dataset] = _entities(data_root, dataset)
        row = dict.fromkeys(SEARCH_COLUMNS)
        row.update(dataset=dataset, model=model, algorithm=algorithm, seed=str(cell.get("seed", seed)),
                   load_1min=(cell.get("loadavg") or [None])[0], entities=entities[dataset])
        summary_path, trials_path = run / "summary.json", run / "trials.parquet"
        if summary_path.exists():
            summary = json.loads(summary_path.read_text())
            best = summary.get("best") or {}
            config = best.get("config") or {}
            row.update(inverse=config.get("inverse"), optimizer=config.get("optimizer"),
                       from_subgraph=bool(best.get("from_subgraph")))
            if algorithm.startswith("kgtuner") and trials_path.exists():
                budget = summary.get("budget") or {}
                trials = pd.read_parquet(trials_path)
                s1, s2 = trials[trials["stage"] == 1], trials[trials["stage"] == 2]
                seconds = float(budget.get("seconds") or np.nan)
                row.update(stage1_trials=len(s1), stage2_trials=len(s2),
                           stage2_finished=int((s2["status"] == "ok").sum()) if len(s2) else 0,
                           stage2_start=float(summary.get("stage2_started_s") or np.nan) / seconds,
                           switch_wait_s=float(budget.get("switch_wait_s") or 0.0),
                           best_stage1=float(s1["valid_mrr"].max()) if len(s1) else np.nan,
                           best_stage2=float(s2["valid_mrr"].max()) if len(s2) else np.nan)
                if algorithm == "kgtuner":
                    try:
                        res, _ = stage_consistency(run)
                        row.update(stage_srcc=res.srcc, stage_n=res.n)
                    except Exception:  # noqa: BLE001 - too few matched configurations in a short search
                        pass
        rows.append(row)
    frame = pd.DataFrame(rows, columns=SEARCH_COLUMNS)
    return frame.astype({"inverse": "boolean", "from_subgraph": "boolean", "optimizer": "string"})


def importance_facts(out: Path) -> pd.DataFrame:
    """Permutation importances of each seed-0 KGTuner search's stage-1 trials (``kgtuner.analysis``)."""
    from kgtuner.analysis import hp_importance

    rows = []
    for run in sorted((out / "cells").glob("*__kgtuner__s0")):
        dataset, model, _, _ = _cell_parts(run)
        try:
            imp = hp_importance(run, stage=1)
        except Exception as exc:  # noqa: BLE001 - a page row, not a failure
            rows.append({"dataset": dataset, "model": model, "hp": None, "permutation": np.nan, "n_trials": 0,
                         "error": str(exc)})
            continue
        for r in imp.itertuples():
            rows.append({"dataset": dataset, "model": model, "hp": r.hp, "permutation": float(r.permutation),
                         "n_trials": int(imp.attrs.get("n_trials") or 0), "error": None})
    return pd.DataFrame(rows, columns=["dataset", "model", "hp", "permutation", "n_trials", "error"])


def collect(args, docs: Path, bench) -> dict:
    """Copy the outputs that exist into ``docs`` and update ``provenance.json``; return the provenance."""
    from kgtuner.bench.record import git_commit

    prov = load_provenance(docs)
    stamp = {"commit": git_commit(), "collected": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             "machine": machine()}
    outs = {"large": Path(args.large), "main": Path(args.main), "ablation": Path(args.ablation)}
    data_root = Path(args.data_root)
    for suite, out in outs.items():
        if not (out / "cells").is_dir():
            continue
        results, curves = bench.collect(out)
        if results.empty:
            continue
        searches = search_facts(out, data_root)
        if suite == "ablation" and (outs["main"] / "cells").is_dir():  # the main suite's KGTuner / RF+BORE cells
            m_res, m_cur = bench.collect(outs["main"])
            m_srch = search_facts(outs["main"], data_root)
            keys = results[["dataset", "model", "seed"]].drop_duplicates()
            for algo in ("kgtuner", "rf_bore"):
                if algo not in set(results["algorithm"]):
                    results = pd.concat([results, m_res[m_res["algorithm"] == algo].merge(keys)], ignore_index=True)
                    curves = pd.concat([curves, m_cur[m_cur["algorithm"] == algo].merge(keys)], ignore_index=True)
                    searches = pd.concat([searches, m_srch[m_srch["algorithm"] == algo].merge(
                        keys.astype({"seed": str}))], ignore_index=True)
        prefix = SUITES[suite]
        results.to_parquet(docs / f"{prefix}results.parquet", index=False)
        curves.to_parquet(docs / f"{prefix}curves.parquet", index=False)
        searches.to_parquet(docs / f"{prefix}searches.parquet", index=False)
        if suite == "main":
            importance_facts(out).to_parquet(docs / "importance.parquet", index=False)
        prov[suite] = {**stamp, "command": SUITE_COMMANDS[suite].format(out=out),
                       "scale": _scale_lines(bench, suite, sorted(results["dataset"].unique()))}
        print(f"collected {out} -> {docs}/{prefix}results.parquet ({len(results)} searches)")
    srcc_outs = {f"large_srcc_{Path(p).name.replace('bench_ablation_', '')}": Path(p) for p in args.large_srcc}
    srcc_outs["srcc"] = Path(args.srcc)
    for name, out in srcc_outs.items():
        if not (out / "runs.parquet").is_file():
            continue
        pd.read_parquet(out / "runs.parquet").to_parquet(docs / f"{name}_runs.parquet", index=False)
        meta = json.loads((out / "summary.json").read_text()).get("meta", {}) if (out / "summary.json").is_file() else {}
        command = (out / "command.txt").read_text().strip() if (out / "command.txt").is_file() else \
            f"python scripts/benchmarks/bench_ablation.py --out {out}"
        prov[name] = {**stamp, "command": command.replace(f"{REPO}/", ""), "top_k": meta.get("top_k", 5),
                      "controls": meta.get("controls"), "sampler_ratio": _sampler_ratio(command)}
        print(f"collected {out} -> {docs}/{name}_runs.parquet")
    (docs / "provenance.json").write_text(json.dumps(prov, indent=1, sort_keys=True) + "\n")
    return prov


def _sampler_ratio(command: str) -> float:
    words = command.split()
    return float(words[words.index("--sampler-ratio") + 1]) if "--sampler-ratio" in words else 0.2


def _scale_lines(bench, suite: str, datasets) -> list[str]:
    """How the paper's settings were scaled down for a suite (its settings in scripts/benchmarks/bench_search.py)."""
    sizes = ", ".join(f"`{o}`" for o in bench.FULL_SIZES + bench.DECOUPLED_SIZES)
    if suite == "large":
        per = "; ".join(f"{d}: " + ", ".join(f"`{o}`" for o in bench.large_trial_controls(d)[1:]) for d in datasets)
        return ["- Parallelism: **2 trials in flight per search** (`" + "`, `".join(bench.LARGE_CLUSTER) + "`: one "
                "CPU core and one torch thread per trial), one search at a time on the 2 cores, the same for every "
                "algorithm.",
                f"- CPU scale of the paper's settings, the same for every algorithm: {sizes}; trial controls {per}."]
    return ["- Parallelism: one trial at a time on one CPU core for every algorithm; two searches ran side by side "
            "on the two cores.",
            f"- CPU scale of the paper's settings: {sizes}, "
            + ", ".join(f"`{o}`" for o in bench.TRIAL_CONTROLS[1:]) + "."]
