"""A recording's Parquet tables and card, generated from its journal (any time, also mid-recording).

- ``runs.parquet``: one row per run (:data:`RUN_SCHEMA`): pool, configuration (a column per
  hyper-parameter, ``negatives`` as text since it mixes numbers and ``1VsAll``/``kVsAll``, plus
  ``config_json`` with the exact values), sizes, train seed, status / stop reason / error, steps, epochs,
  best validation (MRR, Hits@k, step), test metrics at the best validation (null on the stage-1
  subgraph: it has no test split), the measured seconds of each segment, the controls and the cap;
- ``curves.parquet``: one row per (run, validation) (:data:`CURVE_SCHEMA`): step, epoch, validation
  metrics, the cumulative measured training and validation seconds at that point, ``final`` (the
  validation at the run's end when it is off the ``valid_every`` grid);
- ``card.json``: the card's facts for programs (graph, settings, counts, expansion coverage) and the journal's
  header and session records (``kgtuner bench restore`` rebuilds the journal from them and the Parquet tables);
- ``card.md``: how the table was recorded (commit, command, machine, threads, hours so far, settings,
  the pre-recording estimate), how many runs ended each way per pool with their median epochs, which
  expansions are covered, the repeated seeds -- every figure computed here from the journal.
"""

from __future__ import annotations

import json
import shlex
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping

from kgtuner.bench.pool import POOLS, RecordSettings, rank_runs
from kgtuner.bench import card_cost
from kgtuner.bench.record import METRICS, TABLE_STOP_REASONS, Journal, parse_shard
from kgtuner.errors import ConfigError

HP_COLUMNS = {"negatives": "string", "loss": "string", "gamma": "float64", "adv_weight": "float64",
              "regularizer": "string", "reg_weight": "float64", "dropout": "float64", "optimizer": "string",
              "lr": "float64", "initializer": "string", "inverse": "bool"}
RUN_COLUMNS: dict[str, str] = {
    "run_id": "string", "pool": "string", "dataset": "string", "graph": "string", "model": "string",
    "config_index": "int64", "stage1_rank": "int64", "seed": "int64", "batch_size": "int64", "dim": "int64",
    **HP_COLUMNS, "config_json": "string",
    "status": "string", "stop_reason": "string", "error": "string", "steps": "int64", "epochs": "float64",
    "steps_per_epoch": "int64", "n_valid": "int64", "best_step": "int64",
    **{f"best_valid_{k}": "float64" for k in METRICS}, **{f"test_{k}": "float64" for k in METRICS},
    "stage1_valid_mrr": "float64",
    **{f"seconds_{k}": "float64" for k in ("setup", "train", "valid", "test", "total")},
    "threads": "int64", "cap_s": "float64", "max_epochs": "int64", "valid_every": "int64", "patience": "int64",
    "max_valid_triples": "int64", "started_unix": "float64", "ended_unix": "float64", "load_start": "float64",
    "load_end": "float64", "session_unix": "float64",
    # the priced cost (cost="calibrated", kgtuner.bench.cost; null in tables recorded before): the run's cost, the
    # step its cap set, its shape's prices
    "cost": "float64", "cap_steps": "int64", "cost_step_s": "float64", "cost_valid_s": "float64",
    # why the run was recorded: "main" (its pool's plan), "noise" (the pool's extra seeds) or "answers" (a
    # replayed search's answer given more seeds); null for runs recorded before the column
    "phase": "string"}
#: Run columns only a calibrated recording fills (a restore leaves them out of an older table's records).
COST_COLUMNS = ("cost", "cap_steps", "cost_step_s", "cost_valid_s")
#: Run columns that runs recorded before them lack (a restore leaves a null one out of the run's record).
LATER_COLUMNS = (*COST_COLUMNS, "phase")
CURVE_COLUMNS: dict[str, str] = {
    "run_id": "string", "pool": "string", "seed": "int64", "point": "int64", "step": "int64", "epoch": "float64",
    **{f"valid_{k}": "float64" for k in METRICS}, "loss": "float64", "lr": "float64", "train_s": "float64",
    "valid_s": "float64", "seconds": "float64", "final": "bool", "cost": "float64"}


def _schema(columns: Mapping[str, str]):
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}
    return pa.schema([(name, types[t]) for name, t in columns.items()])


RUN_SCHEMA = _schema(RUN_COLUMNS)
CURVE_SCHEMA = _schema(CURVE_COLUMNS)


# ------------------------------------------------------------------------------------ reading
def _unreadable(path: Path, exc: BaseException) -> ConfigError:
    reason = (str(exc).strip().splitlines() or [""])[0]
    return ConfigError(f"{path} is not a readable Parquet file ({type(exc).__name__}: {reason}); the table is "
                       "damaged (a copy cut short?): write it again with `kgtuner bench report` from its journal, "
                       "or copy the table again")


def _need(path: Path, have: Iterable[str], need: Iterable[str]) -> None:
    missing = [c for c in need if c not in set(have)]
    if missing:
        raise ConfigError(f"{path} lacks the column(s) {missing}: not a table written by `kgtuner bench report`")


def read_frame(path: str | Path, need: Iterable[str] = ()):
    """``pd.read_parquet(path)``; ConfigError (one line naming the file) when it cannot be read or lacks a column
    of ``need``."""
    import pandas as pd

    path = Path(path)
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - whatever pyarrow says of a damaged file, the file is at fault
        raise _unreadable(path, exc) from None
    _need(path, frame.columns, need)
    return frame


def read_arrow(path: str | Path, need: Iterable[str] = (), columns: list[str] | None = None):
    """``pyarrow.parquet.read_table(path, columns=columns)``; ConfigError (one line naming the file) when it cannot
    be read or lacks a column of ``need``."""
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        names = pq.read_schema(path).names
        _need(path, names, [*need, *(columns or [])])
        return pq.read_table(path, columns=columns)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever pyarrow says of a damaged file, the file is at fault
        raise _unreadable(path, exc) from None


def read_card(path: str | Path) -> dict:
    """A table's ``card.json``; ConfigError (one line naming it) when it is not a JSON object."""
    path = Path(path)
    try:
        card = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not readable JSON ({type(exc).__name__}: {exc}); write the table again with "
                          "`kgtuner bench report`, or copy it again") from None
    if not isinstance(card, dict):
        raise ConfigError(f"{path} is not a card written by `kgtuner bench report` (not a JSON object)")
    return card


# ------------------------------------------------------------------------------------ journal
def load_journal(path: str | Path) -> tuple[dict, list[dict], list[dict]]:
    """(header, sessions, runs) of a journal file or of the folder holding ``journal.jsonl``; runs in
    journal order, one per ``run_id`` (the first, should a run ever be written twice)."""
    path = Path(path)
    if path.is_dir():
        path = path / "journal.jsonl"
    if not path.is_file():
        raise ConfigError(f"no journal at {path} (record one with `kgtuner bench record`)")
    records = Journal(path).read()
    header = next((r for r in records if r.get("kind") == "header"), None)
    if header is None:
        raise ConfigError(f"{path} has no header record: not a kgtuner bench journal")
    sessions = [r for r in records if r.get("kind") == "session"]
    runs, seen = [], set()
    for r in records:
        if r.get("kind") == "run" and r["run_id"] not in seen:
            seen.add(r["run_id"])
            runs.append(r)
    return header, sessions, runs


def load_records(path: str | Path, kind: str) -> list[dict]:
    """The records of one ``kind`` of a journal (file or folder)."""
    path = Path(path)
    return [r for r in Journal(path / "journal.jsonl" if path.is_dir() else path).read() if r.get("kind") == kind]


def load_calibrations(path: str | Path) -> list[dict]:
    """The ``calibration`` records of a journal (file or folder): the prices of a calibrated recording."""
    return load_records(path, "calibration")


def _stage1_ranks(runs: Iterable[Mapping]) -> dict[int, tuple[int, float | None]]:
    """stage-1 configuration index -> (rank in the stage-1 pool, 1 = best; its validation MRR), seed 0."""
    main = [r for r in runs if r["pool"] == "stage1" and int(r["seed"]) == 0]
    return {int(r["config_index"]): (n, r.get("best_valid_mrr")) for n, r in enumerate(rank_runs(main), 1)}


def run_records(header: Mapping, runs: list[dict]) -> list[dict]:
    """The rows of ``runs.parquet`` (plain dicts, in :data:`RUN_COLUMNS` order)."""
    ranks = _stage1_ranks(runs)
    out = []
    for r in runs:
        cfg = r["config"]
        row = {k: r.get(k) for k in RUN_COLUMNS}
        row["dataset"] = header.get("dataset")
        for k in HP_COLUMNS:
            v = cfg.get(k)
            row[k] = None if v is None else (str(v) if HP_COLUMNS[k] == "string" else v)
        row["config_json"] = json.dumps(cfg, sort_keys=True)
        rank = ranks.get(int(r["config_index"])) if r["pool"] in ("stage1", "expand") else None
        row["stage1_rank"] = rank[0] if rank else None
        row["stage1_valid_mrr"] = rank[1] if rank and r["pool"] == "expand" else None
        out.append(row)
    return out


def curve_records(runs: Iterable[Mapping]) -> list[dict]:
    """The rows of ``curves.parquet``."""
    out = []
    for r in runs:
        for i, p in enumerate(r.get("curve") or []):
            out.append({"run_id": r["run_id"], "pool": r["pool"], "seed": r["seed"], "point": i, "step": p["step"],
                        "epoch": p["epoch"], **{f"valid_{k}": p.get(f"valid_{k}") for k in METRICS},
                        "loss": p.get("loss"), "lr": p.get("lr"), "train_s": p["train_s"], "valid_s": p["valid_s"],
                        "seconds": p["train_s"] + p["valid_s"], "final": bool(p.get("final")),
                        "cost": p.get("cost")})
    return out


def write_parquet(rows: list[dict], schema, path: str | Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {f.name: [row.get(f.name) for row in rows] for f in schema}
    table = pa.Table.from_pydict(cols, schema=schema)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


# ------------------------------------------------------------------------------------ figures
def _median(values: Iterable[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _f(v, fmt: str = ".2f", none: str = "-") -> str:
    return none if v is None else format(v, fmt)


def shards_text(sessions: list[Mapping]) -> str:
    """How many runs a recording process trained at once, and how many processes ran side by side (``--shard``)."""
    split = [parse_shard(x["shard"])[1] for x in sessions if x.get("shard")]
    if not split:
        return "one run at a time"
    return (f"one run at a time per process; {len(split)} of the {len(sessions)} sessions were shards of a split, "
            f"up to {max(split)} processes side by side (`record --shard k/n`, one core each)")


def session_hours(sessions: list[Mapping], runs: list[Mapping]) -> tuple[float, float]:
    """(wall-clock hours of the recording so far: per session, from its start to its last run's end;
    hours of the runs themselves: the sum of their total seconds)."""
    starts = sorted(float(s["started_unix"]) for s in sessions)
    wall = 0.0
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else float("inf")
        ends = [float(r["ended_unix"]) for r in runs if start <= float(r["ended_unix"]) < end]
        if ends:
            wall += max(ends) - start
    return wall / 3600, sum(float(r["seconds_total"]) for r in runs) / 3600


def stop_counts(runs: list[Mapping]) -> dict[str, dict[str, Any]]:
    """Per pool: runs, and per stop reason (:data:`TABLE_STOP_REASONS`) the count and median epochs."""
    out = {}
    for pool in POOLS:
        rows = [r for r in runs if r["pool"] == pool]
        by = {}
        for reason in TABLE_STOP_REASONS:
            sel = [r for r in rows if r["stop_reason"] == reason]
            by[reason] = {"runs": len(sel), "median_epochs": _median(r["epochs"] for r in sel)}
        out[pool] = {"runs": len(rows), "seeds": sorted({int(r["seed"]) for r in rows}),
                     "diverged": sum(r["status"] == "diverged" for r in rows),
                     "median_epochs": _median(r["epochs"] for r in rows),
                     "median_seconds": _median(r["seconds_total"] for r in rows),
                     "hours": sum(float(r["seconds_total"]) for r in rows) / 3600, "stops": by}
    return out


def plan_counts(runs: list[Mapping]) -> tuple[dict[str, int], int]:
    """Per pool, the runs its plan asked for (phase "main" or "noise"), and the number of runs recorded later to
    give the replays' answers their seeds (phase "answers"), which no plan counts."""
    in_plan = Counter(r["pool"] for r in runs if r.get("phase") != "answers")
    return dict(in_plan), len(runs) - sum(in_plan.values())


def answer_runs_text(n: int) -> str:
    """The clause a card or the page appends to its planned-runs count for the answers' seeds ("" for none)."""
    return f", plus {n} runs that give the replays' answers their seeds" if n else ""


def expansion_coverage(header: Mapping, runs: list[Mapping]) -> dict[str, Any]:
    """Which stage-1 configurations have which expanded sizes recorded (seed 0), and the longest prefix of
    the stage-1 ranking whose expansions are all recorded (a search's top-k within it misses none)."""
    sizes = [tuple(s) for s in header.get("expand_sizes") or []]
    ranks = _stage1_ranks(runs)
    have: dict[int, set] = {}
    for r in runs:
        if r["pool"] == "expand" and int(r["seed"]) == 0:
            have.setdefault(int(r["config_index"]), set()).add((int(r["batch_size"]), int(r["dim"])))
    by_rank = sorted(ranks.items(), key=lambda kv: kv[1][0])
    prefix = 0
    for idx, _ in by_rank:
        if have.get(idx, set()) >= set(sizes) and sizes:
            prefix += 1
        else:
            break
    configs = [{"stage1_index": idx, "stage1_rank": ranks.get(idx, (None,))[0],
                "stage1_valid_mrr": ranks.get(idx, (None, None))[1],
                "sizes": sorted(have[idx]), "complete": have[idx] >= set(sizes)} for idx in have]
    configs.sort(key=lambda c: (c["stage1_rank"] is None, c["stage1_rank"] or 0))
    return {"sizes": sizes, "configs": configs, "covered_prefix": prefix,
            "stage1_complete": len(ranks) == int(header["settings"]["stage1_configs"])}


def noise_summary(runs: list[Mapping]) -> dict[str, Any]:
    """Per pool: configurations (with their sizes) trained with 2+ seeds, and the median of their
    per-configuration standard deviation of the best validation MRR."""
    out = {}
    for pool in POOLS:
        groups: dict[tuple, list] = {}
        for r in runs:
            if r["pool"] == pool:
                groups.setdefault((int(r["config_index"]), int(r["batch_size"]), int(r["dim"])), []).append(r)
        multi = {k: v for k, v in groups.items() if len({int(r["seed"]) for r in v}) >= 2}
        stds = []
        for v in multi.values():
            vals = [float(r["best_valid_mrr"]) for r in v if r.get("best_valid_mrr") is not None]
            if len(vals) >= 2:
                stds.append(statistics.stdev(vals))
        out[pool] = {"configs": len(multi), "max_seeds": max((len(v) for v in multi.values()), default=0),
                     "median_std": _median(stds)}
    return out


def restart_command(header: Mapping, journal_dir: str | Path) -> str:
    """The command that continues the recording (settings come from the journal's header)."""
    out = Path(journal_dir)
    dataset = header["settings"]["dataset"]
    return (f"nohup nice -n 10 .venv/bin/kgtuner bench record --dataset {shlex.quote(str(dataset))} "
            f"--out {shlex.quote(str(out))} >> {shlex.quote(str(out / 'record.log'))} 2>&1 &")


def report_command(journal_dir: str | Path, out_dir: str | Path) -> str:
    return f".venv/bin/kgtuner bench report --journal {shlex.quote(str(journal_dir))} --out {shlex.quote(str(out_dir))}"


# ------------------------------------------------------------------------------------ card
#: What a run's seconds mean, per ``RecordSettings.clock`` (the card's words).
CLOCK_TEXT = {
    "cpu": "every second in the table (and every cap) is the recording process's CPU time, user + system: with "
           "one torch thread, what a dedicated core takes, so the machine's load does not lengthen it (cache and "
           "memory contention aside)",
    "wall": "every second in the table (and every cap) is wall-clock time, and the machine is shared, so the "
            "seconds carry its load",
}


def card(header: Mapping, sessions: list[Mapping], runs: list[Mapping], *, journal_dir: str | Path,
         out_dir: str | Path, now: float | None = None, calibrations: list[Mapping] = ()) -> str:
    """``card.md``: every figure computed from the journal's records."""
    s = RecordSettings.from_header(header["settings"])
    machine = header.get("machine") or {}
    planned = header.get("planned") or {}
    counts = stop_counts(runs)
    cover = expansion_coverage(header, runs)
    noise = noise_summary(runs)
    wall_h, run_h = session_hours(sessions, runs)
    total_planned = sum(int(v) for v in planned.values())
    pools = [p for p in POOLS if p in planned]  # a table recorded before the decoupled pool has none
    in_plan, answer_runs = plan_counts(runs)
    complete = all(in_plan.get(p, 0) >= int(planned.get(p, 0)) for p in pools)
    commits = sorted({str(x.get("commit")) for x in sessions} - {str(header.get("commit"))})
    threads = sorted({int(r["threads"]) for r in runs if r.get("threads") is not None})
    loads = [r.get("load_end") for r in runs if r.get("load_end") is not None]
    sub, full = header.get("subgraph") or {}, header.get("full_graph") or {}
    unit = s.valid_unit
    b1, d1 = header.get("stage1_sizes") or (None, None)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(now if now is not None else time.time()))
    L = [f"# Recorded table: {header.get('dataset')} ({s.model})", "",
         f"Generated by `kgtuner bench report` from `{Path(journal_dir) / 'journal.jsonl'}` on {when}; every figure "
         "below is computed from the journal. Do not edit by hand: rerun the report command.", "",
         f"**{'Complete' if complete else 'Partial'}:** {len(runs) - answer_runs} of {total_planned} planned runs "
         "recorded (" + ", ".join(f"{p} {in_plan.get(p, 0)}/{planned.get(p, 0)}" for p in pools) + ")"
         + answer_runs_text(answer_runs) + ".", "",
         "## How it was recorded", "",
         f"- Commit: `{header.get('commit')}`" + (f" (later sessions: {', '.join(f'`{c}`' for c in commits)})"
                                                  if commits else ""),
         f"- Code digest (kgtuner/kge, bench, data, search, conf/space) per session: "
         f"{', '.join(f'`{d}`' for d in dict.fromkeys(str(x.get('code', 'unrecorded')) for x in sessions)) or '-'}",
         f"- Command: `{header.get('command')}`",
         f"- Restart, from the repository root (continues where it stopped; settings come from the journal): `{restart_command(header, journal_dir)}`",
         f"- Report (Parquet + this card, any time): `{report_command(journal_dir, out_dir)}`",
         "- On another machine or a fresh checkout, first rebuild the journal from this table (then restart): "
         f"`.venv/bin/kgtuner bench restore --table {shlex.quote(str(out_dir))} --out {shlex.quote(str(journal_dir))}`",
         f"- Machine: {machine.get('cores')} cores ({machine.get('cpu')}), {machine.get('memory_gib')} GiB RAM, "
         f"{machine.get('os')}; Python {machine.get('python')}, torch {machine.get('torch')}; host `{machine.get('host')}`",
         f"- Threads: {s.threads} torch thread per run (measured in the runs: {threads or '-'}); "
         + shards_text(sessions) + ", niced; " + CLOCK_TEXT[s.clock] + " (1-minute load "
         f"average at run ends: median {_f(_median(loads))}, max {_f(max(loads) if loads else None)})",
         f"- Time so far: {wall_h:.2f} h of wall clock over {len(sessions)} session(s); the runs' own seconds sum "
         f"to {run_h:.2f} h", ""]
    L += ["## Settings (fixed before the first run)", "",
          f"- Model {s.model}; train seed 0 for every configuration, seeds 1.. for the repeated ones; pool seed {s.seed}",
          f"- Every run: until early stopping (patience {s.patience} validations without improvement, "
          f"`conf/trial/{s.trial}.yaml`; learning rate halved after 2 stalled ones, the engine's default), "
          f"{s.max_epochs} epochs of its graph, or its pool's cap on training + validation seconds "
          f"({'CPU' if s.clock == 'cpu' else 'wall-clock'} seconds), "
          "whichever comes first. A run stopped by its cap validates its final state once and is tested at its "
          "best validation.",
          f"- `stage1`: {s.stage1_configs} configurations of the `{s.stage1_space}` space (drawn with seed {s.seed}) on "
          f"the stage-1 subgraph `{sub.get('name')}` ({s.subgraph_sampler}, ratio {s.subgraph_ratio}, seed {s.seed}: "
          f"{sub.get('entities')} entities, {sub.get('train')} train / {sub.get('valid')} valid triples, no test "
          f"split) at batch {b1} x dim {d1}; validation every {s.stage1_valid_every} {unit} on "
          f"{_triples(s.stage1_max_valid_triples)}; cap {s.stage1_cap_s:g} s",
          f"- `expand`: the top {s.expand_top} stage-1 configurations by subgraph validation MRR at every stage-2 size "
          f"({', '.join(f'b{b} x d{d}' for b, d in cover['sizes'])}) on the full graph `{full.get('name')}` "
          f"({full.get('entities')} entities, {full.get('train')} train / {full.get('valid')} valid / "
          f"{full.get('test')} test triples); validation every {s.expand_valid_every} {unit} on "
          f"{_triples(s.expand_max_valid_triples)}; cap {s.expand_cap_s:g} s",
          f"- `full`: {s.full_configs} configurations of the `{s.full_space}` space (drawn with seed {s.seed} + 1000) on "
          f"the full graph; validation every {s.full_valid_every} {unit} on {_triples(s.full_max_valid_triples)}; "
          f"cap {s.full_cap_s:g} s",
          *([f"- `decoupled`: {s.decoupled_configs} configurations of the `{s.stage1_space}` space, each at a stage-2 "
             f"size drawn with it (seed {s.seed} + 3000), on the full graph: the pool of the one-stage searches over "
             f"KGTuner's own space; validation every {s.decoupled_valid_every} {unit} on "
             f"{_triples(s.decoupled_max_valid_triples)}; cap {s.decoupled_cap_s:g} s"] if s.decoupled_configs else []),
          *(["- The full-graph pools validate on a fixed sample of valid triples (the same in every run, "
              "`max_valid_triples`) where `trial.stage2` ranks all of them: on one core a whole validation of a "
              "large dimension costs as much as the training a cap allows. Test metrics rank the whole test split."]
            if s.expand_max_valid_triples is not None or s.full_max_valid_triples is not None else []),
          "- Repeated seeds: " + "; ".join(
              f"`{p}` the top {s.noise(p)[0]} + {s.noise(p)[1]} random non-failed configurations x {s.noise(p)[2]} seeds"
              for p in pools if s.noise(p)[2] >= 2), ""]
    if s.cost == "calibrated" or s.decoupled_configs:
        L += card_cost.section(header, runs, calibrations)
    est = header.get("estimate") or {}
    L += ["## Estimate before recording", ""]
    if est.get("pools"):
        L += ["From pilot runs on this machine (`kgtuner bench pilot`, the same settings), before the first run: mean "
              "pilot seconds x planned runs.", "",
              "| pool | pilot runs | mean s | max s | pilot stops (patience/epochs/cap/failed) | cap s | planned runs | hours |",
              "|---|---|---|---|---|---|---|---|"]
        for p, e in est["pools"].items():
            st = e.get("pilot_stops") or {}
            L.append(f"| {p} | {e['pilot_runs']} | {e['pilot_mean_s']} | {e['pilot_max_s']} | "
                     f"{'/'.join(str(st.get(k, 0)) for k in TABLE_STOP_REASONS)} | {e['cap_s']:g} | "
                     f"{e['planned_runs']} | {e['hours']:.2f} |")
        L += ["", f"Estimated total: **{est['hours']:.1f} h** of one core. The estimate and the caps above were "
              "written into the journal's header before the first run."
              + (f" {est['note']}" if est.get("note") else ""), ""]
    else:
        L += ["No pilot estimate was given to this recording.", ""]
    L += ["## Runs by pool and stop reason", "",
          f"| pool | runs | seeds | patience | {s.max_epochs} epochs | time cap | failed (diverged) | median epochs | "
          "median s | hours |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for p in pools:
        c = counts[p]
        cell = {k: f"{c['stops'][k]['runs']} (ep {_f(c['stops'][k]['median_epochs'])})" for k in TABLE_STOP_REASONS}
        L.append(f"| {p} | {c['runs']} | {','.join(map(str, c['seeds'])) or '-'} | {cell['patience']} | {cell['epochs']} "
                 f"| {cell['time_cap']} | {cell['failed']} [{c['diverged']}] | {_f(c['median_epochs'])} | "
                 f"{_f(c['median_seconds'], '.1f')} | {c['hours']:.2f} |")
    L += ["", "Each stop-reason cell: runs (their median epochs). Failed: an exception or a divergence (in brackets); "
          "its error is in `runs.parquet`.", ""]
    L += ["## Expansions covered", ""]
    if not cover["configs"]:
        L += ["None yet" + ("" if cover["stage1_complete"] else " (the expansions wait for the complete stage-1 pool)")
              + ".", ""]
    else:
        n_complete = sum(c["complete"] for c in cover["configs"])
        L += [f"{n_complete} stage-1 configurations have all {len(cover['sizes'])} expanded sizes recorded (seed 0); the "
              f"best {cover['covered_prefix']} of the stage-1 ranking are all covered, so a replayed KGTuner search "
              f"whose top-k stage-1 configurations all rank within the pool's top {cover['covered_prefix']} needs no "
              "missing expansion (a replay reports any miss).", "",
              "| stage-1 rank | stage-1 index | subgraph valid MRR | sizes recorded |", "|---|---|---|---|"]
        for c in cover["configs"]:
            L.append(f"| {c['stage1_rank']} | {c['stage1_index']} | {_f(c['stage1_valid_mrr'], '.4f')} | "
                     f"{', '.join(f'b{b}xd{d}' for b, d in c['sizes'])} |")
        L.append("")
    L += ["## Repeated seeds", "",
          "| pool | configurations with 2+ seeds | most seeds | median std of best valid MRR |", "|---|---|---|---|"]
    for p in pools:
        n = noise[p]
        L.append(f"| {p} | {n['configs']} | {n['max_seeds']} | {_f(n['median_std'], '.4f')} |")
    L += ["", "## Files", "",
          "- `runs.parquet`: one row per run: " + ", ".join(f"`{k}`" for k in RUN_COLUMNS) + ".",
          "- `curves.parquet`: one row per (run, validation): " + ", ".join(f"`{k}`" for k in CURVE_COLUMNS)
          + ". `train_s`/`valid_s` are the cumulative measured seconds of training steps and of validations at that "
          "point (`seconds` their sum); the run's setup and test seconds are in `runs.parquet`.", ""]
    return "\n".join(L)


def _triples(n: int | None) -> str:
    return "every valid triple" if n is None else f"a fixed sample of at most {n} valid triples"


def finalize(journal_dir: str | Path, out_dir: str | Path, *, now: float | None = None) -> dict[str, Any]:
    """Write ``runs.parquet``, ``curves.parquet`` and ``card.md`` of the journal in ``journal_dir`` to ``out_dir``."""
    header, sessions, runs = load_journal(journal_dir)
    calibrations = load_calibrations(journal_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_parquet(run_records(header, runs), RUN_SCHEMA, out / "runs.parquet")
    write_parquet(curve_records(runs), CURVE_SCHEMA, out / "curves.parquet")
    (out / "card.md").write_text(card(header, sessions, runs, journal_dir=journal_dir, out_dir=out_dir, now=now,
                                      calibrations=calibrations) + "\n")
    data = card_data(header, sessions, runs, calibrations, answers=load_records(journal_dir, "answers"))
    (out / "card.json").write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    return {"runs": len(runs), "out": str(out), "counts": data["counts"]}


def card_data(header: Mapping, sessions: list[Mapping], runs: list[Mapping],
              calibrations: list[Mapping] = (), answers: list[Mapping] = ()) -> dict[str, Any]:
    """``card.json``: the card's facts for programs (a replay reads the graph, the settings and the coverage). The
    journal's header, session, calibration and ``answers`` records (the replays' answers given more seeds) are kept
    under ``journal`` so that ``kgtuner bench restore`` rebuilds the same journal."""
    wall_h, run_h = session_hours(sessions, runs)
    cover = expansion_coverage(header, runs)
    in_plan, answer_runs = plan_counts(runs)
    return {"graph": header.get("dataset"), "model": header["settings"].get("model"), "settings": header["settings"],
            "stage1_sizes": header.get("stage1_sizes"), "expand_sizes": header.get("expand_sizes"),
            "subgraph": header.get("subgraph"), "full_graph": header.get("full_graph"), "planned": header.get("planned"),
            "runs": len(runs), "in_plan": in_plan, "answer_runs": answer_runs, "counts": stop_counts(runs),
            "noise": noise_summary(runs),
            "coverage": {"covered_prefix": cover["covered_prefix"], "stage1_complete": cover["stage1_complete"],
                         "expanded": [[c["stage1_index"], c["stage1_rank"], [list(x) for x in c["sizes"]]]
                                      for c in cover["configs"]]},
            "commit": header.get("commit"), "codes": list(dict.fromkeys(str(x.get("code", "unrecorded")) for x in sessions)),
            "command": header.get("command"), "machine": header.get("machine"), "estimate": header.get("estimate"),
            "hours": {"wall": wall_h, "runs": run_h}, "sessions": len(sessions),
            # the journal's own header and session records: `kgtuner bench restore` rebuilds the journal from them
            # and the Parquet tables, so a recording continues on another machine (kgtuner.bench.restore)
            "journal": {"header": dict(header), "sessions": [dict(x) for x in sessions],
                        **({"calibrations": [dict(x) for x in calibrations]} if calibrations else {}),
                        **({"answers": [dict(x) for x in answers]} if answers else {})},
            **({"protocol": card_cost.protocol_data(header, runs, calibrations)} if calibrations else {})}
