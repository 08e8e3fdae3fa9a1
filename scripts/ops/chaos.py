#!/usr/bin/env python
"""Chaos soak (issue 42, part 2): one KGTuner search on the demo graph under a seeded schedule of faults, then
checks of its history against the promises of docs/operations.md ("Faults and guarantees", "More budget for a
search"). Run by hand or before a release, not in CI (the 30-minute run's output is committed as
docs/ops/chaos.txt; tests/test_chaos.py runs a 2-minute version with `make test-all`):

    .venv/bin/python scripts/ops/chaos.py --seed 0 --log docs/ops/chaos.txt           # about 30 minutes
    .venv/bin/python scripts/ops/chaos.py --minutes 2 --seed 1 --log /tmp/chaos.txt   # a short one (minutes)
    .venv/bin/python scripts/ops/chaos.py --check RUN_DIR                              # the checks alone

**The set-up.** A local two-node Ray cluster, started as tests/test_ops_multinode.py starts its own
(``ray.cluster_utils.Cluster`` in a helper process: a head on 127.0.0.2 and a worker node on 127.0.0.3, 4 logical
GPUs and 4 CPUs each, token authentication on, a private Ray temp dir and token), and the search's driver as a
separate process attached to it (``cluster=remote cluster.address=HEAD``) in its own process group, so the
script can signal it, kill it and start it again with ``resume=true``. The run directory lies on a 64 MB tmpfs
(``mount -t tmpfs``, root only; when the mount is refused the run directory is on the ordinary disk, the full-disk
fault is left out and the output says so). The search: ``budget.seconds=B0`` (0.8 x the final budget B, B = 0.6 x
``--minutes`` x 60 s, at least 90 s), ``seed=--seed``, trials made long enough to be hit while they train (stage
1: 600 steps, stage 2: 900) and checkpointed every 5 s, so a retried trial continues from a checkpoint.

**The schedule** (``plan_schedule``; every time drawn from ``random.Random(--seed)``) is in *active seconds*: the
search's own budget clock, read from ``kgtuner_state.json`` (saved every 2 s), so a fault lands at the same point
of the search however long the machine takes to restart a driver. With ``--minutes`` >= 10:

- ``trial_kill``: kill -9 of a running trial's worker process (an alive actor of the trainable, from the
  dashboard's actor list): max(20, 0.75 x minutes) times, uniform over the budget;
- ``raylet_kill``: kill -9 of the worker node's raylet (every trial there dies with it), the node started again
  5-20 s later (``Cluster.remove_node`` + ``add_node``): max(2, minutes / 15) times;
- ``sigterm``: SIGTERM to the driver's process group, then ``resume=true``: max(3, minutes / 10) times;
- ``kill9``: kill -9 of the driver, then ``resume=true``: max(3, minutes / 10) times; the first one is fired
  *inside the stage switch*, the moment the driver prints ``stage 1 ends at`` (it lands between stage 1's close
  and the switch, or just after the switch; the output says which), and its resume carries the **budget
  extension** (``resume=true budget.seconds=B``, from B0);
- ``disk_full``: the tmpfs filled by a file until ENOSPC, held until the driver has stopped (at least 3 s), then
  deleted, then ``resume=true``: max(1, minutes / 30) times.

Driver stops are at least 5 % of B apart and away from the switch; the first ``sigterm`` is in stage 1. Below 10
minutes the schedule is the cheap handful: one ``trial_kill``, one ``sigterm`` in stage 1 and the ``kill9`` at the
switch (with the extension); ``--every-kind`` adds one ``raylet_kill`` and one ``disk_full`` in stage 2.

**The checks**, printed PASS/FAIL; the script exits non-zero if any fails (or the run could not finish). The
history checks (``check_history``) read the run directory alone (plus, optionally, the drivers' outputs and the
times of the driver's kill -9, which excuse what the docs say a crash re-runs); each tests a guarantee of
docs/operations.md:

1. ``rows``: every trial that reported a final result (a final line of its Tune ``result.json``, or a final
   ``trial.json`` checkpoint record) is a row of trials.parquet, and no trial is a row twice -- "Ctrl+C, SIGTERM:
   resume=true loses no finished trial", "A crash of the driver loses no finished trial and counts none twice", "a
   lost worker node is retried and loses no trial". Excused: a trial that ended for want of space ("A full disk":
   no row, the resume runs it again), and one whose final report reached only result.json before a kill -9 and
   that ran again under another trial id.
2. ``trial_index``: no ``trial_index`` twice among the rows -- "its trial_index is not reused" (a crash of the
   driver), "trial_index continues" (More budget for a search).
3. ``no retraining``: no configuration trained by two trials of one stage, and no trial training again after its
   final report, except what a resume re-runs by the docs: "Only the trials that were running when the driver
   died run again (from their last checkpoint)" -- a trial cut by a kill -9 before it reported, which the restored
   searcher proposes again, and a trial whose final report the killed driver never recorded.
4. ``validation kept``: every ok/stopped row keeps at least the validation MRR its trial had saved in its first
   restore point (a result.json report with a checkpoint; ``valid_mrr`` is the best so far, so every later restore
   point holds at least as much) -- "Only the trials that were running when the driver died run again (from their
   last checkpoint)" and the deadline rule of docs/architecture.md (a trial at its deadline "keeps its best
   validation so far").
5. ``budget``: summary.json's ``used_s`` within 5 % of the budget (the extended one; at least 15 s, because on a
   loaded machine the last trials' final validation and test after the deadline take about 10 s whatever the
   budget), the extension recorded (``budget.extensions``, ``started_with``) and the state file's clock equal to
   it -- "More budget for a search" (the extended budget becomes the run's) and "A crash of the driver" (the clock
   of the state file is not counted twice).
6. ``switch``: the stage switch happened once: the state is in stage 2 with its switch time, every stage-1
   ``trial_index`` precedes every stage-2 one, and the drivers' outputs show one ``stage switch at`` per timeline
   (a resume that restored stage 1 may redo it: "the restored searcher re-announces what it redoes") -- "The stage
   and the strategy's entries come from kgtuner's snapshot saved inside Tune's checkpoint", and the extension
   keeps the stage split.
7. ``answer``: the answer's ``embeddings.npz`` scored by the independent evaluator of tests/answer_helpers.py
   (numpy, float64, from the raw demo files) gives summary.json's test MRR (``kgtuner.load_model(run_dir)
   .evaluate("test")`` when tests/ is absent) -- "Using the answer".

The fault checks (from what the script saw): every scheduled fault was injected; every SIGTERM ended with exit
130 and the resume command, every full disk with exit 2, one ``kgtuner: error:`` line saying the disk is full,
no temporary file and no reserve left ("A full disk"); every resume continued the search ("resuming the ...") and
the last session ended with exit 0; the worker node came back after each raylet kill.

The output (also written to ``--log``) starts with the commit (``git rev-parse HEAD``, ``+dirty``) and the source
tree's hash (scripts/*/tree_hash.sh), then the events as they happen, the faults injected (counts per kind, with
times) and the checks. ``--keep`` keeps the work folder (the run directory, copied off the tmpfs, the drivers'
and the cluster's output); otherwise it is removed.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import platform
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
GPUS_PER_NODE = CPUS_PER_NODE = 4
TMPFS_SIZE = "64m"
#: Trials long enough to be hit while they train, checkpointed often enough to continue from a checkpoint.
TRIAL_OVERRIDES = ("trial.stage1.max_steps=600", "trial.stage1.valid_every=50", "trial.stage2.max_steps=900",
                   "trial.stage2.valid_every=100", "trial.checkpoint_every_s=5")
BUDGET_TOLERANCE = 0.05
BUDGET_FLOOR_S = 15.0
DRIVER_STOPS = ("sigterm", "kill9", "disk_full")
KINDS = ("trial_kill", "raylet_kill", "sigterm", "kill9", "disk_full")
SWITCH_LINE = "stage switch at t="
CLOSE_LINE = "stage 1 ends at t="
RESUME_MARK = "[kgtuner] resuming the "


# =============================================================================================== the schedule
@dataclass
class Fault:
    """One planned fault: ``at_s`` in active seconds of the search's budget clock (None: at the stage switch)."""

    kind: str
    at_s: float | None
    extend: bool = False  # its resume carries the budget extension
    restart_after_s: float = 0.0  # raylet_kill: wall seconds until the worker node is started again

    def label(self) -> str:
        when = "at the stage switch" if self.at_s is None else f"t={self.at_s:.0f}s"
        return f"{self.kind} {when}" + (" (+ budget extension on its resume)" if self.extend else "")


@dataclass
class Schedule:
    minutes: float
    seed: int
    budget_s: int  # B0, the budget the search starts with
    final_budget_s: int  # B, after the extension
    faults: list[Fault]

    @property
    def switch_s(self) -> float:
        return self.budget_s / 2.0

    def counts(self) -> dict[str, int]:
        return {k: sum(f.kind == k for f in self.faults) for k in KINDS}


def plan_schedule(minutes: float, seed: int, disk: bool = True, every_kind: bool = False) -> Schedule:
    """The seeded schedule of ``minutes`` (see the module docstring); ``disk=False``: no full-disk fault;
    ``every_kind``: a short schedule (below 10 minutes) also gets one raylet kill and one full disk, in stage 2."""
    rng = random.Random(seed)
    final = max(90, int(round(0.6 * minutes * 60)))
    base = int(round(0.8 * final))
    switch = base / 2.0
    faults = [Fault("kill9", None, extend=True)]
    if minutes < 10:
        faults.append(Fault("trial_kill", round(rng.uniform(0.10, 0.25) * base, 1)))
        faults.append(Fault("sigterm", round(rng.uniform(0.30, 0.40) * base, 1)))
        if every_kind:
            faults.append(Fault("raylet_kill", round(rng.uniform(0.60, 0.68) * final, 1),
                                restart_after_s=round(rng.uniform(5, 10), 1)))
            if disk:
                faults.append(Fault("disk_full", round(rng.uniform(0.75, 0.82) * final, 1)))
        return Schedule(minutes, seed, base, final, sorted(faults, key=_order))
    n_trial = max(20, int(round(0.75 * minutes)))
    n_raylet = max(2, int(minutes // 15))
    n_stop = max(3, int(minutes // 10))
    n_disk = max(1, int(minutes // 30)) if disk else 0
    stops = ["sigterm"] * (n_stop - 1) + ["kill9"] * (n_stop - 1) + ["disk_full"] * n_disk
    rng.shuffle(stops)
    stops.insert(0, "sigterm")  # one in stage 1, whatever the draw
    gap, times = 0.05 * final, []
    for i, _ in enumerate(stops):  # driver stops: apart from each other and from the switch (its own kill9 is there)
        low, high = (0.15 * base, switch - gap) if i == 0 else (0.06 * final, 0.92 * final)
        for _try in range(10000):
            t = rng.uniform(low, high)
            if abs(t - switch) > gap and all(abs(t - u) > gap for u in times):
                times.append(t)
                break
        else:
            raise ValueError(f"cannot place {len(stops)} driver stops {gap:.0f}s apart in {final}s")
    faults += [Fault(kind, round(t, 1)) for kind, t in zip(stops, times)]
    raylet_times: list[float] = []
    for _ in range(n_raylet):
        for _try in range(10000):
            t = rng.uniform(0.08, 0.90) * final
            if all(abs(t - u) > 0.1 * final for u in raylet_times):
                raylet_times.append(t)
                break
    faults += [Fault("raylet_kill", round(t, 1), restart_after_s=round(rng.uniform(5, 20), 1)) for t in raylet_times]
    faults += [Fault("trial_kill", round(rng.uniform(0.03, 0.95) * final, 1)) for _ in range(n_trial)]
    return Schedule(minutes, seed, base, final, sorted(faults, key=_order))


def _order(f: Fault) -> float:
    return -1.0 if f.at_s is None else f.at_s


# =============================================================================================== history checks
@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    guarantee: str = ""

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name}: {self.detail}"


@dataclass
class TuneTrial:
    """One trial folder of Tune's experiment (``search/trial_<id>``)."""

    trial_id: str
    stage: int | None
    trial_index: int | None
    config: str  # the hyper-parameters (no stage, no trial_index) as sorted JSON
    lines: list[dict]  # result.json, in order
    final_record: dict | None  # the newest checkpoint's trial.json report when it is a final record

    @property
    def finals(self) -> list[dict]:
        out = [ln for ln in self.lines if ln.get("trial_status") not in (None, "")]
        if not out and self.final_record is not None:
            out = [self.final_record]
        return out


@dataclass
class History:
    run_dir: Path
    rows: object  # pandas.DataFrame (empty when there is no trials.parquet)
    state: dict
    summary: dict
    trials: dict[str, TuneTrial]
    problems: list[str] = field(default_factory=list)


def _hp_key(config: dict) -> str:
    return json.dumps({k: v for k, v in config.items() if k not in ("stage", "trial_index", "seed")}, sort_keys=True,
                      default=str)


def _read_json(path: Path, problems: list[str]) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        problems.append(f"{path.name} is missing")
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name} cannot be read: {exc}")
    return {}


def load_history(run_dir: str | os.PathLike) -> History:
    """trials.parquet, kgtuner_state.json, summary.json and Tune's trial folders of ``run_dir``."""
    import pandas as pd

    run_dir = Path(run_dir)
    problems: list[str] = []
    try:
        rows = pd.read_parquet(run_dir / "trials.parquet")
    except Exception as exc:  # noqa: BLE001 - reported as a problem of every check that needs rows
        problems.append(f"trials.parquet cannot be read: {exc}")
        rows = pd.DataFrame(columns=["trial_id", "stage", "trial_index", "status", "config_json"])
    state = _read_json(run_dir / "kgtuner_state.json", problems)
    summary = _read_json(run_dir / "summary.json", problems)
    trials: dict[str, TuneTrial] = {}
    for folder in sorted((run_dir / "search").glob("trial_*")):
        if not folder.is_dir():
            continue
        tid = folder.name[len("trial_"):]
        try:
            params = json.loads((folder / "params.json").read_text())
        except (OSError, ValueError):
            params = {}
        lines = []
        try:
            for raw in (folder / "result.json").read_text().splitlines():
                try:
                    lines.append(json.loads(raw))
                except ValueError:
                    pass  # a line cut short by a kill: not a report
        except OSError:
            pass
        record = None
        checkpoints = sorted(folder.glob("checkpoint_*"))
        if checkpoints:
            try:
                saved = json.loads((checkpoints[-1] / "trial.json").read_text())
                record = saved.get("report") if saved.get("final") else None
            except (OSError, ValueError):
                record = None
        if not params and lines:
            params = dict(lines[-1].get("config") or {})
        trials[tid] = TuneTrial(tid, None if params.get("stage") is None else int(params["stage"]),
                                None if params.get("trial_index") is None else int(params["trial_index"]),
                                _hp_key(params), lines, record)
    return History(run_dir, rows, state, summary, trials, problems)


def _disk_full(report: dict) -> bool:
    text = str(report.get("error") or "")
    try:
        from kgtuner.tune.run_dir import is_disk_full_text

        return is_disk_full_text(text)
    except ImportError:
        return "No space left" in text or "Errno 28" in text


def _crash_between(crashes, after: float, before: float) -> bool:
    return any(after - 2.0 <= c <= before + 2.0 for c in crashes)


def check_rows_once(h: History, crashes=()) -> Check:
    """Every trial with a final report is a row, and no trial is a row twice."""
    guarantee = ("Ctrl+C, SIGTERM: resume=true loses no finished trial; a crash of the driver loses no finished "
                 "trial and counts none twice; a lost worker node is retried and loses no trial")
    if "trial_id" not in h.rows or not len(h.rows):
        return Check("rows", False, "no rows in trials.parquet " + "; ".join(h.problems), guarantee)
    ids = list(h.rows["trial_id"])
    twice = sorted({t for t in ids if ids.count(t) > 1})
    rows_by_hp = {}
    for r in h.rows.itertuples():
        rows_by_hp.setdefault((int(r.stage), _hp_key(json.loads(r.config_json))), []).append(r.trial_id)
    missing, excused = [], []
    for tid, trial in h.trials.items():
        finals = trial.finals
        if not finals or tid in set(ids):
            continue
        if any(_disk_full(f) for f in finals):
            excused.append(f"{tid} (ended for want of space)")
            continue
        last = max(float(f.get("timestamp") or f.get("ended_unix") or 0) for f in finals)
        others = [t for t in rows_by_hp.get((trial.stage, trial.config), []) if t != tid]
        if others and _crash_between(crashes, last, math.inf):
            excused.append(f"{tid} (its report was not recorded before a kill -9; run again as {others[0]})")
            continue
        f = finals[-1]
        missing.append(f"{tid} (stage {trial.stage}, trial_index {trial.trial_index}: {f.get('trial_status')}, "
                       f"valid_mrr {f.get('valid_mrr')} at step {f.get('step')})")
    reported = sum(1 for t in h.trials.values() if t.finals)
    ok = not twice and not missing and not h.problems
    detail = (f"{len(ids)} rows, {len(set(ids))} trial ids; {reported} of {len(h.trials)} Tune trials reported a final "
              f"result")
    if twice:
        detail += f"; recorded twice: {', '.join(twice)}"
    if missing:
        detail += f"; reported a final result but no row: {', '.join(missing)}"
    if excused:
        detail += f"; excused: {', '.join(excused)}"
    if h.problems:
        detail += "; " + "; ".join(h.problems)
    return Check("rows", ok, detail, guarantee)


def check_trial_index_once(h: History) -> Check:
    guarantee = "a crash of the driver: its trial_index is not reused; More budget: trial_index continues"
    if "trial_index" not in h.rows or not len(h.rows):
        return Check("trial_index", False, "no rows with a trial_index", guarantee)
    idx = [int(i) for i in h.rows["trial_index"].dropna()]
    twice = sorted({i for i in idx if idx.count(i) > 1})
    ok = not twice and len(idx) == len(h.rows)
    detail = f"{len(idx)} trial indices over {len(h.rows)} rows, {len(set(idx))} distinct"
    if twice:
        who = h.rows[h.rows["trial_index"].isin(twice)][["trial_id", "trial_index"]].values.tolist()
        detail += f"; used twice: {twice} ({who})"
    if len(idx) != len(h.rows):
        detail += f"; {len(h.rows) - len(idx)} rows without one"
    return Check("trial_index", ok, detail, guarantee)


def check_no_retraining(h: History, crashes=(), disk_stops=()) -> Check:
    """No configuration trained by two trials of one stage, no trial training again after its final report, beyond
    what a resume re-runs: a trial cut by a kill -9 (``crashes``) or a full disk (``disk_stops``) before its row was
    written, which the restored searcher proposes again."""
    guarantee = ("only the trials that were running when the driver died run again (from their last checkpoint); "
                 "a kept row never runs again")
    stops = sorted([*crashes, *disk_stops])
    if "trial_id" not in h.rows or not len(h.rows):
        return Check("no retraining", False, "no rows in trials.parquet " + "; ".join(h.problems), guarantee)
    recorded = set(h.rows["trial_id"])
    groups: dict[tuple, list[str]] = {}
    for r in h.rows.itertuples():
        groups.setdefault((int(r.stage), _hp_key(json.loads(r.config_json))), []).append(r.trial_id)
    for tid, t in h.trials.items():
        if tid not in recorded and t.stage is not None:
            groups.setdefault((t.stage, t.config), []).append(tid)
    twice, excused = [], []
    for (stage, _hp), tids in sorted(groups.items()):
        tids = sorted(set(tids))
        if len(tids) < 2:
            continue
        finished = [t for t in tids if t in recorded]
        cut = [t for t in tids if t not in recorded]
        unexplained = []
        for t in cut:
            trial = h.trials.get(t)
            stamps = [float(ln.get("timestamp") or 0) for ln in (trial.lines if trial else [])]
            if trial is not None and any(_disk_full(f) for f in trial.finals):
                continue  # ended for want of space: no row, the resume runs it again
            if stops and (not stamps or _crash_between(stops, max(stamps), math.inf)):
                continue  # running (or its report unrecorded) when the driver was killed or the disk filled
            unexplained.append(t)
        if len(finished) > 1 or unexplained:
            twice.append(f"stage {stage}: {', '.join(tids)}")
        else:
            excused.append(f"stage {stage}: {', '.join(cut)} cut by a stop, run again as "
                           f"{', '.join(finished) or 'another unfinished trial'}")
    again = []
    for tid, t in h.trials.items():
        first_final = None
        for ln in t.lines:
            if ln.get("trial_status") in (None, ""):
                continue
            if first_final is None:
                first_final = ln
            elif ln.get("ended_unix") != first_final.get("ended_unix"):  # a re-report of the final record is the same
                if _crash_between(crashes, float(first_final.get("timestamp") or 0),
                                  float(ln.get("timestamp") or math.inf)):
                    excused.append(f"{tid} trained again after a final report its killed driver never recorded")
                else:
                    again.append(tid)
                break
    ok = not twice and not again
    detail = (f"{len(groups)} configurations in {len({s for s, _ in groups})} stage(s), "
              f"{sum(len(set(v)) for v in groups.values())} trials")
    if twice:
        detail += f"; trained by two trials: {'; '.join(twice)}"
    if again:
        detail += f"; trained again after their final report: {', '.join(sorted(again))}"
    if excused:
        detail += f"; re-runs the docs promise: {'; '.join(excused)}"
    return Check("no retraining", ok, detail, guarantee)


def check_validation_kept(h: History) -> Check:
    """Every ok/stopped row keeps at least the validation its trial had saved in its first restore point: a trial
    that runs again continues from a checkpoint holding its best validation so far (``valid_mrr`` is the best so
    far, so every later restore point holds at least that of the first)."""
    guarantee = ("only the trials that were running when the driver died run again, from their last checkpoint; a "
                 "trial at its deadline stops before its next step and keeps its best validation so far")
    if "trial_id" not in h.rows or not len(h.rows):
        return Check("validation kept", False, "no rows in trials.parquet " + "; ".join(h.problems), guarantee)
    lost, compared = [], 0
    for r in h.rows.itertuples():
        trial = h.trials.get(r.trial_id)
        if trial is None or r.status not in ("ok", "stopped"):
            continue
        saved = [ln for ln in trial.lines if ln.get("checkpoint_dir_name") and ln.get("trial_status") in (None, "")
                 and isinstance(ln.get("valid_mrr"), (int, float)) and math.isfinite(ln["valid_mrr"])]
        if not saved:
            continue
        compared += 1
        floor, got = float(saved[0]["valid_mrr"]), getattr(r, "valid_mrr", None)
        if got is None or not math.isfinite(float(got)) or float(got) < floor - 1e-9:
            lost.append(f"{r.trial_id} (stage {r.stage}: row {r.status} valid_mrr {got}"
                        + (f", error '{r.error}'" if getattr(r, "error", None) else "")
                        + f"; its restore point {saved[0]['checkpoint_dir_name']} at step {saved[0].get('step')} "
                        f"held {floor:.4f})")
    detail = f"{compared} rows of trials that had saved a restore point keep at least its validation"
    if lost:
        detail = f"{len(lost)} of {compared} rows lost the validation of their restore point: " + "; ".join(lost)
    return Check("validation kept", not lost, detail, guarantee)


def check_budget(h: History, budget_s: float | None = None, started_with: float | None = None) -> Check:
    """summary.json's used_s within 5 % (at least BUDGET_FLOOR_S) of the run's budget, which is ``budget_s`` (the
    extended one) when given; the extension recorded; the state file's clock the same."""
    guarantee = ("More budget for a search: the extended budget becomes the run's; a crash of the driver: the "
                 "state file's clock is not counted twice")
    budget = h.summary.get("budget") or {}
    seconds, used = budget.get("seconds"), budget.get("used_s")
    if seconds is None or used is None:
        return Check("budget", False, "summary.json has no budget.seconds / budget.used_s "
                     + "; ".join(h.problems), guarantee)
    seconds, used = float(seconds), float(used)
    tol = max(BUDGET_TOLERANCE * seconds, BUDGET_FLOOR_S)
    problems = []
    if budget_s is not None and abs(seconds - float(budget_s)) > 1e-6:
        problems.append(f"the run's budget is {seconds:g}s, not the {float(budget_s):g}s given")
    extensions = list(budget.get("extensions") or [])
    if started_with is not None and float(started_with) != seconds:
        if not extensions or float(extensions[-1].get("to") or -1) != seconds:
            problems.append(f"the extension {float(started_with):g}s -> {seconds:g}s is not in budget.extensions")
        if float(budget.get("started_with") or -1) != float(started_with):
            problems.append(f"started_with is {budget.get('started_with')}, not {float(started_with):g}")
    if abs(used - seconds) > tol:
        problems.append(f"used {used:.1f}s is {used - seconds:+.1f}s off the budget (tolerance {tol:.1f}s)")
    state_used = h.state.get("search_elapsed_s")
    if state_used is not None and abs(float(state_used) - used) > 0.01:
        problems.append(f"kgtuner_state.json's search_elapsed_s {float(state_used):.3f} != summary's {used:.3f}")
    ext = (f"; extended from {budget.get('started_with')}s: "
           + ", ".join(f"session {e.get('session')} at {e.get('used_s')}s -> {e.get('to')}s" for e in extensions)
           if extensions else "")
    detail = (f"used {used:.1f}s of {seconds:g}s ({(used - seconds) / seconds * 100:+.1f}%, tolerance "
              f"+-{tol:.1f}s){ext}")
    if problems:
        detail += "; " + "; ".join(problems)
    return Check("budget", not problems, detail, guarantee)


def switch_lines(driver_logs) -> tuple[int, list[str]]:
    """(switch lines, problems) over the drivers' outputs in order: one ``stage switch at`` per timeline, a resume
    that restored stage 1 starting a new one (the restored searcher redoes the switch)."""
    count, switched, problems = 0, False, []
    for i, path in enumerate(driver_logs):
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if RESUME_MARK in line and "(stage 1," in line:
                switched = False
            elif SWITCH_LINE in line:
                count += 1
                if switched:
                    problems.append(f"a second switch in the same timeline ({Path(path).name}: "
                                    f"{line.strip()[:90]})")
                switched = True
    return count, problems


def check_switch_once(h: History, driver_logs=()) -> Check:
    guarantee = ("the stage and the strategy's entries come from the snapshot saved inside Tune's checkpoint; an "
                 "extension keeps the stage split")
    problems = []
    st = h.state
    if int(st.get("stage") or 0) != 2 or st.get("switch_s") is None:
        problems.append(f"state: stage {st.get('stage')}, switch_s {st.get('switch_s')}")
    if st.get("stage1_closed_s") is not None and st.get("switch_s") is not None \
            and float(st["switch_s"]) < float(st["stage1_closed_s"]):
        problems.append(f"switch_s {st['switch_s']} before stage1_closed_s {st['stage1_closed_s']}")
    rows = h.rows
    detail = ""
    if len(rows) and "trial_index" in rows:
        s1 = rows[rows["stage"] == 1]["trial_index"].dropna()
        s2 = rows[rows["stage"] == 2]["trial_index"].dropna()
        if len(s1) and len(s2) and int(s1.max()) > int(s2.min()):
            late = rows[(rows["stage"] == 1) & (rows["trial_index"] > int(s2.min()))]["trial_id"].tolist()
            problems.append(f"stage-1 trials after the first stage-2 trial (trial_index > {int(s2.min())}): {late}")
        detail = f"{len(s1)} stage-1 rows (trial_index <= {int(s1.max()) if len(s1) else '-'}), {len(s2)} stage-2 " \
                 f"rows (from {int(s2.min()) if len(s2) else '-'})"
        if not len(s2):
            problems.append("no stage-2 row")
    if driver_logs:
        count, log_problems = switch_lines(driver_logs)
        problems += log_problems
        if count == 0:
            problems.append("no 'stage switch at' line in the drivers' outputs")
        detail += f"; {count} '{SWITCH_LINE.strip()}' line(s) in {len(driver_logs)} driver output(s)"
    detail = f"state: stage {st.get('stage')}, switch at {st.get('switch_s')}s (stage 1 closed at " \
             f"{st.get('stage1_closed_s')}s); " + detail
    if problems:
        detail += "; " + "; ".join(problems)
    return Check("switch", not problems, detail, guarantee)


def check_answer(run_dir: str | os.PathLike) -> Check:
    """The answer's model scores, independently, summary.json's test MRR."""
    guarantee = "Using the answer: the run directory's model gives exactly the reported test metrics"
    run_dir = Path(run_dir)
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        reported = float(summary["best"]["test"]["mrr"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Check("answer", False, f"no test MRR in summary.json ({exc})", guarantee)
    how = "tests/answer_helpers.complex_filtered_ranks (numpy, float64)"
    try:
        tests = str(REPO / "tests")
        if tests not in sys.path:
            sys.path.insert(0, tests)
        from answer_helpers import complex_filtered_ranks  # noqa: E402 - the independent scorer

        import numpy as np

        if summary.get("model") != "complex" or summary.get("dataset") != "demo":
            raise ImportError("the independent scorer is ComplEx on the demo graph only")
        mrr = float(np.mean(1.0 / complex_filtered_ranks(run_dir / "embeddings.npz")))
    except ImportError:
        how = "kgtuner.load_model(run_dir).evaluate('test')"
        try:
            import kgtuner

            mrr = float(kgtuner.load_model(run_dir).evaluate("test")["mrr"])
        except Exception as exc:  # noqa: BLE001
            return Check("answer", False, f"the answer's model cannot be scored: {exc}", guarantee)
    except Exception as exc:  # noqa: BLE001 - missing or damaged embeddings.npz
        return Check("answer", False, f"the answer's model cannot be scored: {type(exc).__name__}: {exc}", guarantee)
    ok = abs(mrr - reported) < 1e-5
    return Check("answer", ok, f"trial {summary['best'].get('trial_id')}: test MRR {mrr:.6f} by {how}, summary.json "
                 f"{reported:.6f}" + ("" if ok else " (they differ)"), guarantee)


def check_history(run_dir: str | os.PathLike, *, driver_logs=(), crashes=(), disk_stops=(),
                  budget_s: float | None = None, started_with: float | None = None, answer: bool = True) -> list[Check]:
    """The history checks of a finished run directory (see the module docstring). ``driver_logs``: the drivers'
    outputs in order (the switch lines); ``crashes``/``disk_stops``: unix times of the driver's kill -9 and of the
    full disks (they excuse what the docs say a resume re-runs); ``budget_s``/``started_with``: the budget given at
    the end and at the start."""
    h = load_history(run_dir)
    checks = [check_rows_once(h, crashes), check_trial_index_once(h), check_no_retraining(h, crashes, disk_stops),
              check_validation_kept(h), check_budget(h, budget_s, started_with), check_switch_once(h, driver_logs)]
    if answer:
        checks.append(check_answer(run_dir))
    return checks


# =============================================================================================== the cluster
_HELPER = textwrap.dedent('''
    import json, os, socket, sys
    from ray.cluster_utils import Cluster

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def raylet(node):
        return node.all_processes["raylet"][0].process.pid

    dash = free_port()
    common = dict(num_cpus={cpus}, num_gpus={gpus}, object_store_memory=200 * 2**20)
    cluster = Cluster(initialize_head=True, head_node_args=dict(
        node_ip_address="{head}", include_dashboard=True, dashboard_host="127.0.0.1",
        dashboard_port=dash, dashboard_agent_listen_port=free_port(), **common))
    try:
        worker = cluster.add_node(node_ip_address="{worker}", **common)
        head = cluster.head_node
        print(json.dumps(dict(dashboard=f"http://127.0.0.1:{{dash}}", address=cluster.address,
                              head_node=head.node_id, worker_node=worker.node_id, raylet=raylet(worker))), flush=True)
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "restart-worker":  # its raylet was killed: remove what is left, start the node again
                cluster.remove_node(worker, allow_graceful=False)
                worker = cluster.add_node(node_ip_address="{worker}", **common)
                print(json.dumps(dict(worker_node=worker.node_id, raylet=raylet(worker))), flush=True)
            elif cmd == "stop":
                break
    finally:
        cluster.shutdown()
''').format(head=HEAD_IP, worker=WORKER_IP, cpus=CPUS_PER_NODE, gpus=GPUS_PER_NODE)


class TwoNodeCluster:
    """The helper process holding the cluster (as tests/test_ops_multinode.py::two_node_cluster)."""

    def __init__(self, work: Path, env: dict):
        self.work, self.env = work, env
        script = work / "cluster_helper.py"
        script.write_text(_HELPER)
        self.log_path = work / "cluster_helper.log"
        self.proc = subprocess.Popen([sys.executable, str(script)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=open(self.log_path, "w"), text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the two-node cluster did not start:\n" + self.log_path.read_text()[-3000:])
        self.info = json.loads(line)
        self.raylet_pid = int(self.info["raylet"])
        self.worker_up = True

    @property
    def headers(self) -> dict:
        return {"Authorization": "Bearer " + Path(self.env["RAY_AUTH_TOKEN_PATH"]).read_text().strip()}

    def restart_worker(self) -> dict:
        self.proc.stdin.write("restart-worker\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the cluster helper ended while restarting the worker node:\n"
                               + self.log_path.read_text()[-3000:])
        info = json.loads(line)
        self.raylet_pid, self.worker_up = int(info["raylet"]), True
        self.info["worker_node"] = info["worker_node"]
        return info

    def trial_actors(self) -> list[dict]:
        """Alive actors of the trainable holding a GPU (as tests/test_ops_multinode.py::_alive_actors, _is_trial)."""
        req = urllib.request.Request(self.info["dashboard"] + "/api/v0/actors?limit=1000&detail=true",
                                     headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=20) as resp:
                actors = json.loads(resp.read())["data"]["result"]["result"]
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            return []
        return [a for a in actors if a.get("state") == "ALIVE" and a.get("pid")
                and "kgtuner" in (a.get("repr_name") or "")
                and any(k.startswith("GPU") for k in a.get("required_resources", {}))]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=90)
            except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
                pass
        try:  # last resort, and whatever its Ray left: the helper's own process group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass


# =============================================================================================== the driver
@dataclass
class Session:
    """One driver process (``python -m kgtuner.launch ...``), in its own process group."""

    index: int
    proc: subprocess.Popen
    out_path: Path
    err_path: Path
    resume: bool
    budget_s: int
    started_wall: float
    start_active: float
    ended_by: str | None = None  # the fault that stopped it
    _seen: str = ""
    _offset: int = 0

    def text(self) -> str:
        """Its stdout so far (read incrementally)."""
        try:
            with open(self.out_path, "rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except OSError:
            return self._seen
        self._offset += len(chunk)
        self._seen += chunk.decode(errors="replace")
        return self._seen

    def stderr(self) -> str:
        try:
            return self.err_path.read_text(errors="replace")
        except OSError:
            return ""


@dataclass
class Injected:
    kind: str
    planned: str
    wall_s: float
    active_s: float
    unix: float
    detail: str
    ok: bool = True
    outcome: str = ""


class Soak:
    """Runs the search under the schedule and records what happened."""

    def __init__(self, schedule: Schedule, work: Path, out, keep: bool):
        self.schedule, self.work, self.out, self.keep = schedule, work, out, keep
        self.t0 = time.monotonic()
        self.rng = random.Random(schedule.seed + 1)
        self.injected: list[Injected] = []
        self.sessions: list[Session] = []
        self.crashes: list[float] = []  # unix times of the driver's kill -9
        self.disk_stops: list[float] = []  # unix times of the full disks
        self.mounted = False
        self.run_dir: Path | None = None
        self.next_try = 0.0  # wall time of the next try of a fault that could not be injected
        self.notes: list[str] = []  # failures seen while running (become the fault checks)
        self.skipped: list[str] = []
        self.budget_s = schedule.budget_s
        self.extended = False
        self.cluster: TwoNodeCluster | None = None
        self.restart_at: float | None = None
        self.restart_delay = 0.0
        self.mount: Path | None = None
        self.peak_disk = 0
        self.finished = False
        self.unexpected = 0

    # ------------------------------------------------------------------ output
    def say(self, msg: str) -> None:
        wall = time.monotonic() - self.t0
        self.out.write(f"[{int(wall // 60):3d}:{int(wall % 60):02d} | t={self.active():7.1f}s] {msg}\n")

    def wall(self) -> float:
        return time.monotonic() - self.t0

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        ray_tmp = self.work / "ray"
        ray_tmp.mkdir()
        token = self.work / "auth_token"
        token.write_text(secrets.token_hex(32))
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
        env.update(RAY_TMPDIR=str(self.work), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token),
                   RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1", KGTUNER_CACHE=str(self.work / "cache"))
        self.env = env
        self.mount = self.work / "disk"
        self.mount.mkdir()
        why = None
        if os.geteuid() != 0 or shutil.which("mount") is None:
            why = "not root" if os.geteuid() != 0 else "no mount command"
        else:
            proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(self.mount)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                why = proc.stderr.strip() or f"mount exit {proc.returncode}"
        if why is not None:
            self.mount_error = why
            self.say(f"NOTE: cannot mount a {TMPFS_SIZE} tmpfs for the run directory ({why}): it is on the ordinary "
                     "disk and the full-disk fault is left out")
            dropped = [f for f in self.schedule.faults if f.kind == "disk_full"]
            self.schedule.faults = [f for f in self.schedule.faults if f.kind != "disk_full"]
            self.skipped += [f"{f.label()} (no tmpfs: {why})" for f in dropped]
            self.mounted = False
        else:
            self.mounted = True
            self.say(f"run directory on a {TMPFS_SIZE} tmpfs at {self.mount}")
        self.run_dir = self.mount / "run"
        self.say(f"starting the two-node cluster (head {HEAD_IP}, worker {WORKER_IP}, {GPUS_PER_NODE} logical GPUs and "
                 f"{CPUS_PER_NODE} CPUs each)")
        self.cluster = TwoNodeCluster(self.work, env)
        self.say(f"cluster up: GCS {self.cluster.info['address']}, dashboard {self.cluster.info['dashboard']}, "
                 f"worker raylet pid {self.cluster.raylet_pid}")

    # ------------------------------------------------------------------ the search's state
    def state(self) -> dict:
        if self.run_dir is None:
            return {}
        try:
            return json.loads((self.run_dir / "kgtuner_state.json").read_text())
        except (OSError, ValueError):
            return {}

    def active(self) -> float:
        if self.run_dir is None:
            return 0.0
        try:
            return float(self.state().get("elapsed_s") or 0.0)
        except (TypeError, ValueError):
            return 0.0

    def disk_used(self) -> int:
        if not self.mounted:
            return 0
        st = os.statvfs(self.mount)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        self.peak_disk = max(self.peak_disk, used)
        return used

    # ------------------------------------------------------------------ driver sessions
    def start_session(self, resume: bool) -> Session:
        index = len(self.sessions) + 1
        out_path, err_path = self.work / f"driver-{index:02d}.out", self.work / f"driver-{index:02d}.err"
        cmd = [sys.executable, "-m", "kgtuner.launch", "cluster=remote",
               f"cluster.address={self.cluster.info['address']}",
               f"hydra.run.dir={self.run_dir}", f"budget.seconds={self.budget_s}", f"seed={self.schedule.seed}",
               *TRIAL_OVERRIDES] + (["resume=true"] if resume else [])
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=out, stderr=err, start_new_session=True)
        session = Session(index, proc, out_path, err_path, resume, self.budget_s, self.wall(), self.active())
        self.sessions.append(session)
        what = ("resume=true " if resume else "") + f"budget.seconds={self.budget_s}"
        self.say(f"session {index}: driver pid {proc.pid} started ({what})")
        if index == 1:
            self.say("  command: " + " ".join(cmd[1:]))
        return session

    @property
    def session(self) -> Session:
        return self.sessions[-1]

    def clock_running(self) -> bool:
        """The current session's budget clock has started (its state moved on since it began)."""
        s = self.session
        return s.proc.poll() is None and "budget clock starts" in s.text()

    def wait_driver(self, timeout: float) -> int | None:
        try:
            return self.session.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill_group(self, session: Session) -> None:
        try:
            os.killpg(session.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            session.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def resume(self, extend: bool = False) -> None:
        if extend and not self.extended:
            self.budget_s, self.extended = self.schedule.final_budget_s, True
        self.start_session(resume=True)

    # ------------------------------------------------------------------ faults
    def record(self, fault: Fault, detail: str, ok: bool = True, outcome: str = "", active: float | None = None,
               wall: float | None = None, unix: float | None = None) -> Injected:
        rec = Injected(fault.kind, fault.label(), self.wall() if wall is None else wall,
                       self.active() if active is None else active, time.time() if unix is None else unix,
                       detail, ok, outcome)
        self.injected.append(rec)
        self.say(f"FAULT {fault.kind}: {detail}" + (f" -> {outcome}" if outcome else "")
                 + ("" if ok else "  [UNEXPECTED]"))
        if not ok:
            self.notes.append(f"{fault.kind} at t={rec.active_s:.1f}s: {outcome}")
        return rec

    def inject(self, fault: Fault) -> bool:
        """Inject ``fault`` now; False: not possible now (retry later)."""
        if fault.kind == "trial_kill":
            actors = sorted(self.cluster.trial_actors(), key=lambda a: int(a["pid"]))
            if not actors:
                return False
            actor = self.rng.choice(actors)
            node = "worker" if actor.get("node_id") == self.cluster.info["worker_node"] else "head"
            try:
                os.kill(int(actor["pid"]), signal.SIGKILL)
            except ProcessLookupError:
                return False
            self.record(fault, f"kill -9 of trial worker pid {actor['pid']} on the {node} node "
                               f"({len(actors)} trial actors alive)")
            return True
        if fault.kind == "raylet_kill":
            if not self.cluster.worker_up or self.session.proc.poll() is not None:
                return False
            pid = self.cluster.raylet_pid
            os.kill(pid, signal.SIGKILL)
            self.cluster.worker_up = False
            self.restart_at, self.restart_delay = self.wall() + fault.restart_after_s, fault.restart_after_s
            self.record(fault, f"kill -9 of the worker node's raylet (pid {pid}); node restart in "
                               f"{fault.restart_after_s:.0f}s")
            return True
        if not self.clock_running():
            return False
        return self.stop_driver(fault)

    def stop_driver(self, fault: Fault) -> bool:
        s = self.session
        active, wall, unix = self.active(), self.wall(), time.time()
        before = self.state()
        s.ended_by = fault.kind
        if fault.kind == "sigterm":
            os.killpg(s.proc.pid, signal.SIGTERM)
            rc = self.wait_driver(240)
            err = s.stderr()
            ok = rc == 130 and "resume=true" in err
            outcome = f"exit {rc}" + (", resume command printed" if "resume=true" in err else ", no resume command")
            detail = f"SIGTERM to the driver's process group (pid {s.proc.pid}) in stage {before.get('stage')}"
        elif fault.kind == "kill9":
            os.kill(s.proc.pid, signal.SIGKILL)
            rc = self.wait_driver(60)
            self.crashes.append(unix)
            ok, outcome = rc == -signal.SIGKILL, f"exit {rc}"
            detail = f"kill -9 of the driver (pid {s.proc.pid}) in stage {before.get('stage')}"
            if fault.at_s is None:
                text = s.text()
                closed = CLOSE_LINE in text
                switched = SWITCH_LINE in text
                after = self.state()
                where = ("between stage 1's close and the switch" if closed and not switched else
                         "just after the switch" if switched else "before stage 1 closed")
                detail += f", {where} (state after: stage {after.get('stage')}, switch_s {after.get('switch_s')})"
        else:  # disk_full
            filler, wrote = self.mount / "chaos_filler", 0
            self.disk_stops.append(unix)
            t_fill = time.monotonic()
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # unbuffered: nothing left to flush
            try:
                for chunk in (b"\0" * (1 << 20), b"\0" * (1 << 12)):
                    try:
                        while True:
                            n = os.write(fd, chunk)
                            wrote += n
                            if n < len(chunk):  # a short write: the disk is full
                                break
                    except OSError as exc:
                        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                            raise
            finally:
                os.close(fd)
            rc = self.wait_driver(240)
            held = time.monotonic() - t_fill
            if held < 3.0:
                time.sleep(3.0 - held)
                held = 3.0
            filler.unlink()
            err = s.stderr()
            errors = [ln for ln in err.splitlines() if ln.startswith("kgtuner: error:")]
            from kgtuner.tune.run_dir import RESERVE_FILE, temp_files

            left = [p.name for p in temp_files(self.run_dir)]
            reserve = (self.run_dir / RESERVE_FILE).exists()
            ok = rc == 2 and len(errors) == 1 and "is full" in errors[0] and "resume=true" in errors[0] \
                and not left and not reserve and "Logging error" not in err
            outcome = (f"exit {rc}, {len(errors)} error line(s)" + (f": {errors[0][:160]}" if errors else "")
                       + (f"; temporary files left: {left}" if left else "") + ("; reserve left" if reserve else "")
                       + ("; '--- Logging error ---' printed" if "Logging error" in err else ""))
            detail = (f"run directory's tmpfs filled ({wrote / 2**20:.1f} MB written until ENOSPC) in stage "
                      f"{before.get('stage')}, held {held:.0f}s, then freed")
        if rc is None:
            outcome = "the driver did not end within the limit; killed"
            ok = False
        self.kill_group(s)
        if fault.kind == "kill9":
            time.sleep(3.0)  # Ray ends the dead job's actors
        self.record(fault, detail, ok, outcome, active=active, wall=wall, unix=unix)
        self.resume(extend=fault.extend)
        return True

    def restart_node_if_due(self) -> None:
        if self.restart_at is None or self.wall() < self.restart_at:
            return
        self.restart_at = None
        t = time.monotonic()
        try:
            info = self.cluster.restart_worker()
        except Exception as exc:  # noqa: BLE001
            self.notes.append(f"the worker node did not come back: {exc}")
            self.say(f"worker node restart FAILED: {exc}")
            return
        self.say(f"worker node started again after {self.restart_delay:.0f}s down (node {info['worker_node'][:12]}, "
                 f"raylet pid {info['raylet']}, {time.monotonic() - t:.1f}s to start)")

    # ------------------------------------------------------------------ the run
    def run(self, deadline_s: float) -> None:
        pending = [f for f in self.schedule.faults if f.at_s is not None]
        switch_faults = [f for f in self.schedule.faults if f.at_s is None]
        late_s = self.schedule.switch_s + 0.05 * self.schedule.budget_s + 20.0
        self.start_session(resume=False)
        while True:
            if self.wall() > deadline_s:
                self.notes.append(f"the soak did not finish within {deadline_s / 60:.0f} minutes")
                self.say("ABORT: out of time")
                self.kill_group(self.session)
                return
            s = self.session
            rc = s.proc.poll()
            if rc is not None:
                if rc == 0:
                    self.say(f"session {s.index}: the search finished (exit 0)")
                    self.finished = True
                    return
                self.unexpected += 1
                tail = " | ".join(s.stderr().strip().splitlines()[-3:])[-400:]
                self.notes.append(f"session {s.index} ended by itself with exit {rc}: {tail}")
                self.say(f"session {s.index}: UNEXPECTED exit {rc}: {tail}")
                if self.unexpected > 3:
                    return
                self.kill_group(s)
                self.resume()
                continue
            self.restart_node_if_due()
            self.disk_used()
            active = self.active()
            if switch_faults and (CLOSE_LINE in s.text() or SWITCH_LINE in s.text() or active > late_s):
                if self.clock_running() or CLOSE_LINE in s.text():
                    fault = switch_faults.pop(0)
                    if CLOSE_LINE not in s.text() and SWITCH_LINE not in s.text():
                        self.say(f"note: the switch fault missed stage 1's close (t={active:.1f}s): fired now")
                    self.stop_driver(fault)
                    continue
            due = [f for f in pending if f.at_s <= active]
            if due and self.wall() >= self.next_try and not (switch_faults and due[0].kind in DRIVER_STOPS
                            and abs(active - self.schedule.switch_s) < 0.05 * self.schedule.budget_s):
                if self.inject(due[0]):
                    pending.remove(due[0])
                    continue
                self.next_try = self.wall() + 1.0
            time.sleep(0.1 if switch_faults and active > self.schedule.switch_s - 10 else 0.25)
        # not reached

    def left_over(self) -> list[str]:
        done = {(r.kind, r.planned) for r in self.injected}
        return [f.label() for f in self.schedule.faults if (f.kind, f.label()) not in done]


# =============================================================================================== the report
class Tee:
    def __init__(self, path: Path | None):
        self.fh = open(path, "w") if path is not None else None

    def write(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
        if self.fh is not None:
            self.fh.write(text)
            self.fh.flush()

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


def provenance() -> str:
    def run(cmd):
        try:
            return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    head = run(["git", "rev-parse", "HEAD"]) or "unknown"
    dirty = "+dirty" if run(["git", "--no-optional-locks", "status", "--porcelain"]) else ""
    found = sorted(REPO.glob("scripts/*/tree_hash.sh"))
    tree = run(["bash", str(found[0]), str(REPO)]) if found else ""
    where = found[0].relative_to(REPO) if found else "scripts/*/tree_hash.sh (not found)"
    return f"commit {head}{dirty}, source tree {tree or 'unknown'} (bash {where})"


def fault_checks(soak: Soak) -> list[Check]:
    counts = {k: sum(r.kind == k for r in soak.injected) for k in KINDS}
    planned = soak.schedule.counts()
    short = [f"{k} {counts[k]} of {planned[k]}" for k in KINDS if counts[k] < planned[k]]
    checks = [Check("faults injected", not short,
                    ", ".join(f"{k} {counts[k]}" for k in KINDS)
                    + (f"; not injected: {'; '.join(short)}" if short else " (as scheduled)")
                    + (f"; left out: {'; '.join(soak.skipped)}" if soak.skipped else ""))]
    bad = [n for n in soak.notes]
    stops = [r for r in soak.injected if r.kind in DRIVER_STOPS]
    checks.append(Check("stops as promised", not [r for r in stops if not r.ok],
                        f"{len(stops)} driver stops: " + "; ".join(f"{r.kind} {r.outcome}" for r in stops)))
    resumed = [s for s in soak.sessions if s.resume]
    not_resumed = [s.index for s in resumed if RESUME_MARK not in s.text()]
    last = soak.sessions[-1] if soak.sessions else None
    checks.append(Check("resumes", soak.finished and not not_resumed and soak.unexpected == 0,
                        f"{len(soak.sessions)} driver sessions, {len(resumed)} resumed"
                        + (f"; session(s) {not_resumed} did not resume the search" if not_resumed else "")
                        + (f"; {soak.unexpected} ended by themselves" if soak.unexpected else "")
                        + ("; the last one ended with exit 0" if soak.finished else
                           f"; the search did not finish (last session exit {last.proc.poll() if last else None})")))
    other = [n for n in bad if not any(n.startswith(k) for k in KINDS)]
    if other:
        checks.append(Check("run", False, "; ".join(other)))
    return checks


def report(soak: Soak, history: list[Check], out) -> bool:
    out.write("\n--- faults injected (t = active seconds of the search's budget clock, w = wall seconds)\n")
    for kind in KINDS:
        recs = [r for r in soak.injected if r.kind == kind]
        times = ", ".join(f"t={r.active_s:.0f} (w={r.wall_s:.0f})" for r in recs)
        out.write(f"{kind:12s} {len(recs):3d}" + (f"  {times}" if recs else "") + "\n")
    for left in soak.left_over():
        out.write(f"not injected: {left}\n")
    checks = fault_checks(soak) + history
    out.write("\n--- checks\n")
    for c in checks:
        out.write(c.line() + "\n")
        if c.guarantee:
            out.write(f"      guarantee: {c.guarantee}\n")
    failed = [c for c in checks if not c.ok]
    out.write(f"\n{len(checks) - len(failed)} of {len(checks)} checks passed"
              + (f"; FAILED: {', '.join(c.name for c in failed)}" if failed else "") + "\n")
    return not failed


def tune_retries(run_dir: Path) -> str:
    """How many trials Tune saw fail (lost workers) and retried, from its latest experiment state."""
    try:
        latest = sorted((run_dir / "search").glob("experiment_state-*.json"))[-1]
        data = json.loads(latest.read_text())["trial_data"]
        fails = [int(json.loads(meta).get("num_failures") or 0) for _state, meta in data]
        return f"{sum(1 for f in fails if f)} of {len(fails)} trials in Tune's latest state were retried " \
               f"({sum(fails)} failures)"
    except (OSError, ValueError, IndexError, KeyError):
        return "Tune's experiment state not readable"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0, help="length of the soak (default 30; < 10: the cheap "
                    "handful of faults)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fault schedule and of the search")
    ap.add_argument("--log", type=Path, default=None, help="also write the output to this file")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (run directory, drivers' outputs)")
    ap.add_argument("--every-kind", action="store_true", help="below 10 minutes: also one raylet kill and one full "
                    "disk (a quick try of every fault)")
    ap.add_argument("--check", type=Path, default=None, metavar="RUN_DIR",
                    help="only run the history checks on a finished run directory")
    args = ap.parse_args(argv)

    out = Tee(args.log)
    try:
        if args.check is not None:
            checks = check_history(args.check)
            for c in checks:
                out.write(c.line() + "\n")
            return 0 if all(c.ok for c in checks) else 1
        return soak_main(args, out)
    finally:
        out.close()


def soak_main(args, out) -> int:
    import ray

    started = time.time()
    out.write(f"kgtuner chaos soak: scripts/ops/chaos.py --minutes {args.minutes:g} --seed {args.seed}"
              + (" --every-kind" if args.every_kind else "") + "\n")
    out.write(f"{provenance()}\n")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    out.write(f"started {time.strftime('%Y-%m-%d %H:%M:%S %Z')} on {platform.node()}: {os.cpu_count()} CPUs, load "
              f"{load:.1f}; Python {platform.python_version()}, Ray {ray.__version__}\n")
    schedule = plan_schedule(args.minutes, args.seed, every_kind=args.every_kind)
    out.write(f"search: the demo graph, KGTuner, budget.seconds={schedule.budget_s} extended to "
              f"{schedule.final_budget_s} on the resume after the switch's kill -9, seed={args.seed}, "
              f"{' '.join(TRIAL_OVERRIDES)}\n")
    out.write("schedule (active seconds): " + "; ".join(
        f"{k} x{n}" for k, n in schedule.counts().items() if n) + "\n")
    for f in schedule.faults:
        out.write(f"  {f.label()}" + (f", node restart after {f.restart_after_s:.0f}s" if f.restart_after_s else "")
                  + "\n")
    out.write("\n--- events ([minutes:seconds of wall time | active seconds])\n")
    work = Path(tempfile.mkdtemp(prefix="kgtchaos", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    soak = Soak(schedule, work, out, args.keep)
    history: list[Check] = []
    kept = None
    try:
        soak.setup()
        soak.run(deadline_s=args.minutes * 60 * 2.5 + 900)
        soak.say(f"stopping the cluster; {tune_retries(soak.run_dir)}; tmpfs peak use "
                 f"{soak.peak_disk / 2**20:.1f} MB of {TMPFS_SIZE}" if soak.mounted else "stopping the cluster")
        soak.cluster.stop()
        if soak.finished:
            history = check_history(soak.run_dir, driver_logs=[s.out_path for s in soak.sessions],
                                    crashes=soak.crashes, disk_stops=soak.disk_stops, budget_s=soak.budget_s,
                                    started_with=schedule.budget_s)
        else:
            history = [Check("history", False, "the search did not finish: no history to check")]
    except BaseException as exc:
        soak.notes.append(f"the soak itself failed: {type(exc).__name__}: {exc}")
        soak.say(f"ERROR: {type(exc).__name__}: {exc}")
        if not isinstance(exc, Exception):
            raise
    finally:
        for s in soak.sessions:
            if s.proc.poll() is None:
                soak.kill_group(s)
        if soak.cluster is not None:
            soak.cluster.stop()
        if args.keep and soak.mount is not None and (soak.mount / "run").exists():
            kept = work / "run"
            shutil.copytree(soak.mount / "run", kept, symlinks=True)
        if getattr(soak, "mounted", False):
            subprocess.run(["umount", "-l", str(soak.mount)], capture_output=True)
    ok = report(soak, history, out)
    if not ok:
        for s in soak.sessions[-2:]:
            own = [ln for ln in s.text().splitlines() if ln.startswith(("[kgtuner]", "kgtuner:"))]
            err = [ln for ln in s.stderr().splitlines() if ln.strip() and "(kgtuner_trial pid=" not in ln]
            out.write(f"\n--- session {s.index}'s last lines ({s.out_path.name}: kgtuner's; {s.err_path.name})\n")
            out.write("\n".join(own[-12:] + err[-8:]) + "\n")
    out.write(f"wall time {(time.time() - started) / 60:.1f} minutes; "
              + (f"work folder kept: {work} (run directory {kept})\n" if args.keep else "work folder removed\n"))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
        time.sleep(2)  # a Ray process exiting late may still create its session folder
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
