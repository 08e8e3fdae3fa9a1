"""Training one run with the engine, and the durable, resumable journal a recording appends to.

:func:`train_config` is the one training path of the recorded tables (and of ``scripts/data/kge_trial_table.py``
/ ``scripts/data/kge_stage2_table.py``): ``kgtuner.kge.Trainer`` with the run's controls, stopped by its
patience, its epoch budget or a time cap (CPU seconds by default; the engine's ``should_stop`` hook, checked
before every step). It measures each segment: setup (model and sampler), training steps (the engine's own clock),
validations and the test evaluation (timed around ``Trainer.evaluate``), and keeps the learning curve:
one point per validation with the cumulative training and validation seconds at that point. A run
stopped by its cap validates its final state once (unless it just did) and computes its test metrics at
its best validation, as a run that ends its epochs does. An exception or a divergence is the run's
result (status ``failed`` / ``diverged``, stop reason ``failed``, the error kept), not the recording's.

:class:`Journal`: one JSON object per line, appended and ``fsync``-ed as soon as a run ends; a line cut
by a kill is dropped at the next open. :func:`record` runs a recording's pools in order, skipping the
runs already in the journal (a restart reproduces the same pools, see :mod:`kgtuner.bench.pool`).
"""

from __future__ import annotations

import fcntl
import itertools
import math
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from kgtuner.bench import cost
from kgtuner.bench.journal import (Journal, append_jsonl, code_digest, git_commit, load_average,  # noqa: F401
                                   machine_info)  # noqa: F401 (re-exported)

__all__ = ["Journal", "append_jsonl", "train_config", "train_run", "record"]
from kgtuner.bench.pool import POOL_GRAPH, POOLS, SCHEMA_VERSION, Pools, RecordSettings, RunSpec
from kgtuner.errors import ConfigError

#: The engine's stop reasons -> the table's.
STOP_REASONS = {"max_epochs": "epochs", "max_steps": "steps", "patience": "patience", "callback": "time_cap"}
#: Stop reasons of a table, in the card's order.
TABLE_STOP_REASONS = ("patience", "epochs", "time_cap", "failed")
METRICS = ("mrr", "hits@1", "hits@3", "hits@10")


# ------------------------------------------------------------------------------------ one run
def train_config(kg, config: Mapping[str, Any], *, model: str, controls: Mapping[str, Any], seed: int = 0,
                 filter_index=None, cap_s: float | None = None, device: str = "cpu",
                 clock: str = "cpu", price=None) -> dict[str, Any]:
    """Train ``config`` (hyper-parameters, with ``batch_size`` and ``dim``) on ``kg`` and describe the run.

    ``controls``: the engine's controls (``max_epochs``, ``max_steps``, ``valid_every``, ``patience``,
    ``max_valid_triples``; ``valid_every_epochs`` instead of ``valid_every``: validate every that many epochs of
    this run's graph and batch size). ``price`` (a :class:`~kgtuner.bench.cost.ShapeCost`): ``cap_s`` caps the
    run's priced cost, so it becomes a step limit fixed before the run (stop reason ``time_cap`` when it binds),
    and each curve point gains its cumulative ``cost``. Returns ``status`` (ok / diverged / failed), ``stop_reason`` (patience /
    epochs / steps / time_cap / failed), ``error``, ``steps``, ``epochs``, ``steps_per_epoch``,
    ``best_valid`` / ``test`` (metric dicts or None), ``best_step``, ``curve`` (one dict per validation:
    step, epoch, valid metrics, loss, lr, cumulative ``train_s`` / ``valid_s``, ``final``: a validation off
    the ``valid_every`` grid, at the end of the run), ``seconds`` (setup / train / valid / test / total)
    and ``threads`` (torch's thread count during the run). ``clock``: ``cpu`` measures every second (and the
    cap) as this process's CPU time, ``wall`` as wall-clock time (:class:`~kgtuner.bench.pool.RecordSettings`).
    """
    import torch

    from kgtuner.kge import TrainConfig, Trainer

    now = _CLOCKS[clock]
    t0 = now()
    seg = {"valid": 0.0, "test": 0.0}
    curve: list[dict[str, Any]] = []
    out: dict[str, Any] = {"status": "failed", "stop_reason": "failed", "error": None, "steps": 0, "epochs": 0.0,
                           "steps_per_epoch": None, "best_valid": None, "test": None, "best_step": None,
                           "curve": curve, "threads": torch.get_num_threads()}
    trainer = None
    controls = dict(controls)
    every_epochs = controls.pop("valid_every_epochs", None)
    valid_every = int(controls.get("valid_every") or 1)
    t_fit = None
    cap_steps = None
    try:
        cfg = TrainConfig.from_dict({**dict(config), **controls, "model": model, "seed": int(seed),
                                     "device": device})

        def on_validation(report: dict) -> None:
            step = int(report["step"])
            curve.append({"step": step, "epoch": float(report["epoch"]),
                          **{f"valid_{k}": _num(report.get(f"valid_{k}")) for k in METRICS},
                          "loss": _num(report.get("loss")), "lr": _num(report.get("lr")),
                          "train_s": train_seconds(), "valid_s": seg["valid"],
                          "final": step % valid_every != 0,
                          **({"cost": price.cost(step, len(curve) + 1)} if price is not None else {})})

        def train_seconds(at: float | None = None) -> float:
            if clock == "wall":
                return float(trainer.train_seconds)  # the engine's own timer of its steps
            # CPU time since training began, less the evaluations
            return (now() if at is None else at) - t_fit - seg["valid"] - seg["test"]

        deadline = [math.inf]
        trainer = Trainer(cfg, kg, filter_index=filter_index, callback=on_validation,
                          should_stop=lambda: now() >= deadline[0])
        evaluate = trainer.evaluate

        def timed_evaluate(split, model=None):
            t = now()
            try:
                return evaluate(split, model)
            finally:
                seg["valid" if split == "valid" else "test"] += now() - t

        trainer.evaluate = timed_evaluate  # Trainer._validate / evaluate_test call it: every evaluation is timed
        out["steps_per_epoch"] = int(trainer.steps_per_epoch)
        if every_epochs is not None:  # the cadence in this run's own epochs
            valid_every = trainer.cfg.valid_every = max(1, round(float(every_epochs) * trainer.steps_per_epoch))
        out["valid_every"] = valid_every
        if price is not None and cap_s is not None:  # the cap on the priced cost: a step limit, fixed now
            cap_steps = price.max_steps(float(cap_s), valid_every)
            limit = trainer.cfg.max_steps
            trainer.cfg.max_steps = cap_steps if limit is None else min(limit, cap_steps)
        out["cap_steps"] = cap_steps
        t_fit = now()
        if cap_s is not None and price is None:
            deadline[0] = t_fit + float(cap_s)
        result = trainer.fit()
        test = result.test
        stop = STOP_REASONS.get(result.stop_reason, result.stop_reason)
        if stop == "steps" and cap_steps is not None and trainer.step >= cap_steps:
            stop = "time_cap"  # the priced cap's step limit
        if result.status == "stopped":  # the time cap: validate the final state once, then test the best
            if len(kg.valid) and trainer.step > 0 and trainer.last_eval_step != trainer.step:
                if trainer._validate(final=True) == "diverged":
                    raise _Diverged(f"validation MRR is NaN at step {trainer.step}")
            test = trainer.evaluate_test()
        if result.status == "diverged":
            out.update(status="diverged", error=result.message)
        else:
            out.update(status="ok", stop_reason=stop, best_valid=_metrics(trainer.best_valid),
                       test=_metrics(test), best_step=int(trainer.best_step) if trainer.best_valid else None)
    except _Diverged as exc:
        out.update(status="diverged", error=str(exc))
    except Exception as exc:  # noqa: BLE001 - a failing configuration is a data point (a failed trial)
        out.update(status="failed", error=f"{type(exc).__name__}: {exc}".strip()[:2000])
    end = now()
    train_s = train_seconds(end) if trainer is not None and t_fit is not None else 0.0
    if trainer is not None:
        out.update(steps=int(trainer.step), epochs=float(trainer.epochs))
    out["seconds"] = {"setup": (t_fit or end) - t0, "train": train_s, "valid": seg["valid"], "test": seg["test"],
                      "total": end - t0}
    out["cost"] = price.cost(out["steps"], len(curve)) if price is not None else None
    return out


class _Diverged(RuntimeError):
    pass


#: ``RecordSettings.clock`` -> its timer: this process's CPU seconds, or wall-clock seconds.
_CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def _num(v) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _metrics(d: Mapping | None) -> dict[str, float] | None:
    if not d:
        return None
    return {k: float(d[k]) for k in METRICS if k in d}


def train_run(spec: RunSpec, kg, settings: RecordSettings, *, filter_index=None, price=None) -> dict[str, Any]:
    """A journal row of ``spec`` trained on ``kg`` (its pool's graph) under ``settings`` (``price``: its shape's,
    with ``cost="calibrated"``)."""
    started = time.time()
    load_start = load_average()
    controls = settings.controls(spec.pool)
    res = train_config(kg, spec.config, model=settings.model, controls=controls,
                       seed=spec.seed, filter_index=filter_index, cap_s=settings.cap_s(spec.pool),
                       clock=settings.clock, price=price)
    best, test = res["best_valid"] or {}, res["test"] or {}
    return {"kind": "run", "run_id": spec.run_id, "pool": spec.pool, "config_index": spec.index,
            "config": spec.config, "batch_size": int(spec.config["batch_size"]), "dim": int(spec.config["dim"]),
            "seed": spec.seed, "graph": kg.name, "model": settings.model, "status": res["status"],
            "stop_reason": res["stop_reason"], "error": res["error"], "steps": res["steps"], "epochs": res["epochs"],
            "steps_per_epoch": res["steps_per_epoch"], "n_valid": len(res["curve"]), "best_step": res["best_step"],
            **{f"best_valid_{k}": best.get(k) for k in METRICS}, **{f"test_{k}": test.get(k) for k in METRICS},
            **{f"seconds_{k}": v for k, v in res["seconds"].items()}, "threads": res["threads"],
            "cap_s": settings.cap_s(spec.pool), **{k: v for k, v in controls.items() if k != "max_steps"},
            "valid_every": res.get("valid_every", controls.get("valid_every")),
            **({"cost": res["cost"], "cap_steps": res["cap_steps"], "cost_step_s": price.step_s,
                "cost_valid_s": price.valid_s} if price is not None else {}),
            "started_unix": round(started, 3), "ended_unix": round(time.time(), 3),
            "load_start": load_start, "load_end": load_average(), "curve": res["curve"]}


# ------------------------------------------------------------------------------------ recording
class Graphs:
    """The recording's two graphs (the full graph, KGTuner's stage-1 subgraph of it) and filter indexes,
    built once."""

    def __init__(self, settings: RecordSettings):
        from kgtuner.data import load_dataset

        self.settings = settings
        self.full = load_dataset(settings.dataset)
        self._sub = None
        self._fi: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self.full.name

    @property
    def sub(self):
        if self._sub is None:
            from kgtuner.data import sample_subgraph

            s = self.settings
            self._sub = sample_subgraph(self.full, ratio=s.subgraph_ratio, seed=s.seed,
                                        sampler=s.subgraph_sampler).graph
        return self._sub

    def for_pool(self, pool: str):
        """(graph, filter index) a run of ``pool`` trains on."""
        role = POOL_GRAPH[pool]
        kg = self.sub if role == "sub" else self.full
        if role not in self._fi:
            from kgtuner.data import FilterIndex

            self._fi[role] = FilterIndex.from_graph(kg)
        return kg, self._fi[role]


def default_out(dataset: str) -> Path:
    """``outputs/bench_tables/<dataset name>``."""
    return Path("outputs") / "bench_tables" / Path(str(dataset).rstrip("/")).name


def check_header(header: Mapping[str, Any], settings: RecordSettings, pools_: Pools,
                 runs: Iterable[Mapping[str, Any]] = ()) -> None:
    """Refuse to continue a journal recorded with other settings or whose pools this code draws differently
    (:meth:`Pools.same_pools`: its fingerprint, else its recorded ``runs`` one by one)."""
    old = RecordSettings.from_header(header.get("settings") or {}).to_dict()  # a later setting: its legacy value
    new = settings.to_dict()
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if diff:
        pairs = ", ".join(f"{k}: journal {old.get(k)!r} vs now {new.get(k)!r}" for k in diff)
        raise ConfigError(f"the journal was recorded with other settings ({pairs}); settings are fixed "
                          "before the first run: record into another --out, or restart with the journal's settings")
    runs = list(runs)
    if not pools_.same_pools(header.get("fingerprint") or {}, runs):
        why = pools_.mismatches(runs)[:3]
        raise ConfigError("this code draws other pools than the journal's (pool fingerprints differ: journal "
                          f"{header.get('fingerprint')} vs now {pools_.fingerprint()}"
                          + (f"; {'; '.join(why)}" if why else "") + "); the recording cannot continue with this "
                          "version")


def record(settings: RecordSettings, out: str | Path, *, command: str | None = None,
           estimate: Mapping[str, Any] | None = None, max_runs: int | None = None,
           log: Callable[[str], None] = print, pools: Iterable[str] = POOLS,
           answers: Iterable[str] = (), shard: tuple[int, int] | None = None) -> dict[str, Any]:
    """Record (or continue) the table of ``settings`` into ``out/journal.jsonl``; return a summary.

    The first call writes the header (settings, pool fingerprints, commit, command, machine, the
    ``estimate``); every call appends a ``session`` record, then trains the runs not yet in the journal,
    pool by pool (:data:`POOLS`, then the repeated seeds), appending each as soon as it ends.
    ``max_runs``: stop after that many runs (tests, pilots). ``answers``: run ids of replayed searches' answers
    (``results.parquet``'s ``answer_run``); each answer's configuration is trained with seeds 1 ..
    :data:`~kgtuner.bench.pool.ANSWER_SEEDS` - 1 after the pools (the ids are kept in the journal, so a restart
    records the same runs), so that every answer's training noise enters the replays' intervals.
    ``shard``: ``(k, n)``: record only the k-th of every n runs of each phase (1-based), so that n processes,
    one per shard, record one journal side by side (:func:`in_shard`); each holds its shard's lock."""
    import torch

    torch.set_num_threads(int(settings.threads))
    out = Path(out)
    journal = Journal(out / "journal.jsonl")
    _lock(out, shard)  # held until this process ends: one recording per journal (or per shard of it)
    records = journal.read()
    _refuse_if_running(records, shard)
    journal.repair()
    records = journal.read()
    graphs = Graphs(settings)
    pools_ = Pools(settings, graphs.name)
    fingerprint = pools_.fingerprint()
    header = next((r for r in records if r.get("kind") == "header"), None)
    command = command or " ".join(shlex.quote(a) for a in sys.argv)
    if header is None:
        header = {"kind": "header", "schema": SCHEMA_VERSION, "dataset": graphs.name, "settings": settings.to_dict(),
                  "fingerprint": fingerprint, "stage1_sizes": list(pools_.stage1_sizes()),
                  "expand_sizes": [list(s) for s in pools_.expand_sizes()], "planned": pools_.planned_counts(),
                  "subgraph": graphs.sub.stats(), "full_graph": graphs.full.stats(), "commit": git_commit(),
                  "code": code_digest(),
                  "command": command, "machine": machine_info(), "created_unix": round(time.time(), 3),
                  "estimate": dict(estimate or {})}
        journal.append(header)
    else:
        check_header(header, settings, pools_, [r for r in records if r.get("kind") == "run"])
    t_session = time.time()
    # the session is written before its first run only: a call with nothing left to record (a complete table,
    # continued by scripts/benchmarks/replay_benchmark.sh in every session) adds no session, commit or host to the card
    session = {"kind": "session", "started_unix": round(t_session, 3), "pid": os.getpid(), "commit": git_commit(),
               "code": code_digest(), "command": command, "host": machine_info()["host"],
               "threads": torch.get_num_threads(), "nice": _nice(), "shard": shard_text(shard)}
    rows = {r["run_id"]: r for r in records if r.get("kind") == "run"}
    log(f"{graphs.name}: {len(rows)} run(s) in {journal.path}; planned {pools_.planned_counts()} "
        f"(stage-1 graph {graphs.sub.name}: {graphs.sub.stats()['train']} train triples)")
    done_now = 0
    chosen = [p for p in POOLS if p in set(pools) and (p != "decoupled" or settings.decoupled_configs > 0)]
    prices = {}
    if settings.cost == "calibrated":  # every shape priced before the first run, once per table
        _refuse_unpriced_shard(shard, cost.needed_shapes(pools_, chosen), cost.prices(records))
        prices = cost.calibrate_missing(cost.needed_shapes(pools_, chosen), graphs, settings, cost.prices(records),
                                        journal.append, log)
    answer_ids = _answer_ids(records, answers, journal, graphs.name, log)
    phases = [(p, "main") for p in chosen] + [(p, "noise") for p in chosen] + [(None, "answers")]
    seen = -1  # the journal's size when last read for the other shards' runs
    for passes in itertools.count():  # one pass; a shard passes again while the others may unlock a phase
        done_before, gated = done_now, False
        for pool, kind in phases:
            if shard is not None:  # the other shards' runs so far: what plans the next phase
                seen = _catch_up(journal, rows, seen)
            if kind == "main":
                if pool == "expand" and not _complete(pools_.main_runs("stage1"), rows):
                    gated = True
                    if passes == 0:
                        log("expand: waits for the complete stage-1 pool")
                    continue
                specs = pools_.main_runs(pool, list(rows.values()))
            elif kind == "noise":
                if not _complete(_main_specs(pools_, pool, rows), rows):
                    gated = True
                    continue
                specs = pools_.noise_runs(pool, list(rows.values()))
            else:  # the seeds of the replays' answers (ANSWER_SEEDS each), after every pool's own runs
                specs = pools_.answer_runs(answer_ids)
            specs = list({s.run_id: s for s in specs}.values())  # two answers of one configuration: its seeds once
            todo = [s for i, s in enumerate(specs) if s.run_id not in rows and in_shard(i, shard)]
            for n, spec in enumerate(todo, 1):
                if max_runs is not None and done_now >= max_runs:
                    log(f"stopped after {done_now} run(s) (max_runs)")
                    return {"runs": len(rows), "recorded_now": done_now, "complete": False}
                if done_now == 0:
                    journal.append(session)
                kg, fi = graphs.for_pool(spec.pool)
                price = None
                if settings.cost == "calibrated":
                    shape = cost.Shape.of(POOL_GRAPH[spec.pool], spec.config)
                    prices = cost.calibrate_missing([shape], graphs, settings, prices, journal.append, log)
                    price = prices[shape.key]
                row = train_run(spec, kg, settings, filter_index=fi, price=price)
                row["phase"] = kind  # why it was recorded: its pool's plan (main), noise seeds, or a replay's answer
                row["session_unix"] = round(t_session, 3)
                journal.append(row)
                rows[row["run_id"]] = row
                done_now += 1
                log(progress_line(row, n, len(todo), kind, len(rows), time.time() - t_session))
        if shard is None or (done_now == done_before and not gated):
            break
        if done_now == done_before:  # a phase waits for the other shards' runs: wait while one records
            if not _other_shards_alive(out, shard):
                break
            time.sleep(SHARD_POLL_S)
    if shard is not None:
        _catch_up(journal, rows, seen)
    complete = all(_complete(_main_specs(pools_, p, rows), rows) for p in chosen)
    log(f"{graphs.name}: {len(rows)} run(s) recorded ({done_now} now); complete: {complete}")
    return {"runs": len(rows), "recorded_now": done_now, "complete": complete}


def _catch_up(journal: Journal, rows: dict[str, Mapping], seen: int) -> int:
    """Add the journal's runs to ``rows`` when it has grown since it was ``seen`` bytes long; return its size."""
    size = journal.path.stat().st_size if journal.path.is_file() else 0
    if size != seen:
        rows.update({r["run_id"]: r for r in journal.read() if r.get("kind") == "run"})
    return size


_LOCKS: dict[str, Any] = {}
#: Seconds a shard waits before it looks again for runs a phase it waits on needs from the other shards.
SHARD_POLL_S = 5.0


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"k/n"`` -> ``(k, n)`` (1 <= k <= n); None for None; ConfigError naming the value otherwise."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ConfigError(f"--shard {text!r}: give k/n with 1 <= k <= n (e.g. --shard 1/2 and --shard 2/2 for two "
                          "processes recording one journal side by side)")
    return int(m.group(1)), int(m.group(2))


def shard_text(shard: tuple[int, int] | None) -> str | None:
    """``(k, n)`` -> ``"k/n"`` (a session's ``shard``); None for a whole recording."""
    return None if shard is None else f"{shard[0]}/{shard[1]}"


def in_shard(index: int, shard: tuple[int, int] | None) -> bool:
    """Whether the run at ``index`` of its phase's plan belongs to ``shard`` (with no shard, every run does)."""
    return shard is None or index % shard[1] == shard[0] - 1


def _lock(out: Path, shard: tuple[int, int] | None = None):
    """Locks held for this process's lifetime (ConfigError if another process holds one that excludes them):
    ``out/record.lock`` exclusive for a whole recording; for a shard, ``record.lock`` shared (the other shards'
    processes may hold it too, a whole recording may not) and ``out/record.shard-k-of-n.lock`` exclusive."""
    out.mkdir(parents=True, exist_ok=True)
    if shard is not None:  # shards of another split would plan other shares of the same runs
        for path in out.glob("record.shard-*-of-*.lock"):
            if not path.name.endswith(f"-of-{shard[1]}.lock") and _held(path):
                raise ConfigError(f"a shard of another split is recording into {out} (it holds {path}): every "
                                  f"process of one journal gives the same N in --shard k/N")
    paths = [(out / "record.lock", fcntl.LOCK_EX if shard is None else fcntl.LOCK_SH)]
    if shard is not None:
        paths.append((_shard_lock(out, *shard), fcntl.LOCK_EX))
    taken = []
    for path, mode in paths:
        if str(path) in _LOCKS:
            continue
        fh = _take(path, mode, tries=1 if shard is None else 5)  # a shard's lock may be probed for an instant
        if fh is None:
            for key in taken:  # none of this call's locks outlives its refusal
                _LOCKS.pop(key).close()
            what = "a whole recording or another shard's process" if shard is None else \
                "a whole recording (no --shard)" if path.name == "record.lock" else f"shard {shard_text(shard)}"
            raise ConfigError(f"another `kgtuner bench record` is recording {what} into {out} (it holds {path}); "
                              "one recording per journal, or one process per shard")
        if mode == fcntl.LOCK_EX:
            fh.seek(0)
            fh.truncate()
            fh.write(f"{os.getpid()}\n")
            fh.flush()
        _LOCKS[str(path)] = fh
        taken.append(str(path))
    return [_LOCKS[str(path)] for path, _ in paths]


def _take(path: Path, mode: int, tries: int):
    """``path`` opened and locked in ``mode`` without waiting (``tries`` times, 0.2 s apart), or None."""
    fh = path.open("a+")
    for attempt in range(tries):
        try:
            fcntl.flock(fh.fileno(), mode | fcntl.LOCK_NB)
            return fh
        except OSError:
            if attempt + 1 < tries:
                time.sleep(0.2)
    fh.close()
    return None


def _other_shards_alive(out: Path, shard: tuple[int, int]) -> bool:
    """Whether a process holds the lock of another shard of ``shard``'s split (probed without waiting)."""
    return any(_held(_shard_lock(out, k, shard[1])) for k in range(1, shard[1] + 1) if k != shard[0])


def _shard_lock(out: Path, k: int, n: int) -> Path:
    """The lock file shard ``k`` of ``n`` holds while it records into ``out``."""
    return out / f"record.shard-{k}-of-{n}.lock"


def _held(path: Path) -> bool:
    """Whether another process holds an exclusive lock on ``path`` (a probe that keeps none)."""
    if not path.is_file():
        return False
    fh = _take(path, fcntl.LOCK_SH, tries=1)
    if fh is None:
        return True
    fh.close()
    return False


def _refuse_if_running(records: list[dict], shard: tuple[int, int] | None = None) -> None:
    """Refuse when a session of the journal (since its last ``restore``) is a live ``bench record`` process (one
    started before the locks) that this one may not run beside: any, or for a shard, a whole recording or the
    same shard."""
    kinds = [r.get("kind") for r in records]
    first = len(kinds) - kinds[::-1].index("restore") if "restore" in kinds else 0  # before: another machine's pids
    for rec in records[first:]:
        if rec.get("kind") != "session":
            continue
        pid = int(rec.get("pid") or 0)
        if pid <= 0 or pid == os.getpid():
            continue
        other = rec.get("shard")
        if shard is not None and other is not None and other != shard_text(shard):
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "bench" in cmdline and "record" in cmdline:
            raise ConfigError(f"the journal's recording is still running (pid {pid}: {cmdline.strip()}); "
                              "one recording per journal, or one process per shard")


def _refuse_unpriced_shard(shard, shapes, have) -> None:
    """A shard does not calibrate: prices are measured in isolation, by a whole recording, before its runs."""
    missing = [s.key for s in shapes if s.key not in have]
    if shard is not None and missing:
        raise ConfigError(f"{len(missing)} shape(s) not priced yet (e.g. {missing[0]}): prices are measured in "
                          "isolation, so start this table without --shard until its first run, then continue it "
                          "in shards")


def _answer_ids(records: list[dict], answers: Iterable[str], journal: Journal, graph: str, log) -> list[str]:
    """The answer run ids the journal holds, with ``answers`` not yet among them appended as an ``answers``
    record."""
    have = list(dict.fromkeys(rid for r in records if r.get("kind") == "answers" for rid in r["run_ids"]))
    new = sorted(set(answers) - set(have))
    if new:
        journal.append({"kind": "answers", "run_ids": new, "unix": round(time.time(), 3)})
        log(f"{graph}: {len(new)} answer configuration(s) to train with more seeds")
    return have + new


def _main_specs(pools_: Pools, pool: str, rows: Mapping[str, Mapping]) -> list[RunSpec]:
    if pool == "expand":
        if not _complete(pools_.main_runs("stage1"), rows):
            return [RunSpec("expand", -1, {"batch_size": 0, "dim": 0})]  # not plannable yet: incomplete
        return pools_.main_runs("expand", list(rows.values()))
    return pools_.main_runs(pool)


def _complete(specs: Iterable[RunSpec], rows: Mapping[str, Any]) -> bool:
    return all(s.run_id in rows for s in specs)


def _nice() -> int | None:
    try:
        return os.nice(0)
    except OSError:  # pragma: no cover
        return None


def _fmt(v, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def progress_line(row: Mapping[str, Any], n: int, total: int, kind: str, recorded: int, elapsed_s: float) -> str:
    """One line per finished run."""
    tag = row["pool"] if kind == "main" else f"{row['pool']}/{kind}"  # a noise seed, or an answer's
    err = f" error={row['error'][:80]!r}" if row.get("error") else ""
    return (f"[{tag} {n}/{total}] {row['run_id']} {row['status']} stop={row['stop_reason']} "
            f"valid_mrr={_fmt(row['best_valid_mrr'])} test_mrr={_fmt(row['test_mrr'])} steps={row['steps']} "
            f"epochs={row['epochs']:.2f} {row['seconds_total']:.1f}s (train {row['seconds_train']:.1f} "
            f"valid {row['seconds_valid']:.1f} test {row['seconds_test']:.1f}) load={row['load_end']}"
            f" | {recorded} recorded, session {elapsed_s / 3600:.2f} h{err}")
