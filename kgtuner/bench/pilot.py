"""A pilot of a recording: a few runs per pool, timed, and the recording's estimated hours.

``kgtuner bench pilot`` appends its runs to ``out/pilot.jsonl`` (never to the journal), so the estimate is made
before a recording's settings are fixed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from kgtuner.bench import cost
from kgtuner.bench.journal import Journal, machine_info
from kgtuner.bench.pool import POOL_GRAPH, POOLS, Pools, RecordSettings, RunSpec
from kgtuner.bench.record import TABLE_STOP_REASONS, Graphs, progress_line, train_run


# ------------------------------------------------------------------------------------ pilot
def pilot(settings: RecordSettings, out: str | Path, *, per_pool: int = 4, log: Callable[[str], None] = print,
          pools: Iterable[str] = POOLS) -> dict[str, Any]:
    """Time ``per_pool`` runs of each pool under ``settings`` (appended to ``out/pilot.jsonl``, never to the
    journal) and estimate the recording's hours: per pool, the mean seconds of its pilot runs x its planned
    runs (:meth:`Pools.planned_counts`). Pilot runs: ``per_pool`` configurations evenly spread over the stage-1
    and full pools (:func:`spread`); for ``expand`` (whose top is not known before the stage-1 pool) the same
    stage-1 configurations, each at the next expanded size in turn. Pilot runs already recorded with the same
    settings are reused."""
    import torch

    torch.set_num_threads(int(settings.threads))
    out = Path(out)
    journal = Journal(out / "pilot.jsonl")
    journal.repair()
    graphs = Graphs(settings)
    pools_ = Pools(settings, graphs.name)
    records = journal.read()
    same = [r for r in records if r.get("kind") == "run" and r.get("settings") == settings.to_dict()]
    have = {r["run_id"]: r for r in same}
    prices = cost.prices(r for r in records if r.get("settings") == settings.to_dict())  # this pilot's prices
    stage1 = pools_.stage1_configs()
    full = pools_.main_runs("full")
    sizes = pools_.expand_sizes()
    decoupled = pools_.main_runs("decoupled")
    picks = {"stage1": spread(len(stage1), per_pool), "full": spread(len(full), per_pool),
             "decoupled": spread(len(decoupled), per_pool)}
    plans = {"stage1": [RunSpec("stage1", i, stage1[i]) for i in picks["stage1"]],
             "full": [full[i] for i in picks["full"]], "decoupled": [decoupled[i] for i in picks["decoupled"]],
             "expand": [RunSpec("expand", i, {**stage1[i], "batch_size": sizes[n % len(sizes)][0],
                                              "dim": sizes[n % len(sizes)][1]})
                        for n, i in enumerate(picks["stage1"])]}
    chosen = [p for p in POOLS if p in set(pools) and plans.get(p)]
    for pool in chosen:
        for n, spec in enumerate(plans[pool], 1):
            if spec.run_id in have:
                continue
            kg, fi = graphs.for_pool(pool)
            price = None
            if settings.cost == "calibrated":
                shape = cost.Shape.of(POOL_GRAPH[pool], spec.config)
                prices = cost.calibrate_missing([shape], graphs, settings, prices,
                                                lambda r: journal.append({**r, "settings": settings.to_dict()}), log)
                price = prices[shape.key]
            row = train_run(spec, kg, settings, filter_index=fi, price=price)
            row["settings"] = settings.to_dict()
            journal.append(row)
            have[row["run_id"]] = row
            log(progress_line(row, n, len(plans[pool]), "main", len(have), 0.0).replace("[", "[pilot ", 1))
    return estimate(settings, pools_, list(have.values()))


def estimate(settings: RecordSettings, pools_: Pools, pilot_rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The recording's estimated hours from pilot rows: mean pilot seconds x planned runs, per pool."""
    planned = pools_.planned_counts()
    per_pool: dict[str, Any] = {}
    total = 0.0
    rows = list(pilot_rows)
    for pool in POOLS:
        secs = [float(r["seconds_total"]) for r in rows if r["pool"] == pool]
        if not secs:
            continue
        mean = sum(secs) / len(secs)
        hours = mean * planned[pool] / 3600
        total += hours
        per_pool[pool] = {"pilot_runs": len(secs), "pilot_mean_s": round(mean, 1), "pilot_max_s": round(max(secs), 1),
                          "cap_s": settings.cap_s(pool), "planned_runs": planned[pool], "hours": round(hours, 2),
                          "pilot_stops": {k: sum(r["stop_reason"] == k for r in rows if r["pool"] == pool)
                                          for k in TABLE_STOP_REASONS}}
    return {"pools": per_pool, "hours": round(total, 2), "machine": machine_info(), "settings": settings.to_dict()}


def spread(n: int, k: int) -> list[int]:
    """``k`` indices evenly spread over ``range(n)`` (first and last included)."""
    if n <= 0 or k <= 0:
        return []
    if k >= n:
        return list(range(n))
    if k == 1:
        return [0]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})
