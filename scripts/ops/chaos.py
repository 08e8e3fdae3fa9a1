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
script can signal it, kill it and start it again with ``resume=true``. The run directory lies on a 1 GB tmpfs
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

**The code** is the package ``soak/`` beside this file (``soak/__init__.py`` says which module does what); this
file is its command line, and its public names are importable from here as before.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)  # scripts/ops: the soak package beside this file
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# the soak's public names, for the tests and `python -c` (each defined in its module of soak/)
from soak.checks import (Check, check_answer, check_budget, check_history, check_no_retraining,  # noqa: E402
                         check_rows_once, check_switch_once, check_trial_index_once, check_validation_kept,
                         switch_lines)
from soak.cluster import Session, TwoNodeCluster  # noqa: E402
from soak.history import History, TuneTrial, load_history, tune_retries  # noqa: E402
from soak.report import (Tee, fault_checks, provenance, report, write_opening, write_plan,  # noqa: E402
                         write_session_tails)
from soak.schedule import (BUDGET_FLOOR_S, BUDGET_TOLERANCE, CLOSE_LINE, CPUS_PER_NODE, DRIVER_STOPS,  # noqa: E402
                           GPUS_PER_NODE, HEAD_IP, KINDS, REPO, RESUME_MARK, SWITCH_LINE, TMPFS_SIZE, TRIAL_OVERRIDES,
                           WORKER_IP, Fault, Schedule, plan_schedule)
from soak.soak import Injected, Soak  # noqa: E402

__all__ = ["BUDGET_FLOOR_S", "BUDGET_TOLERANCE", "CLOSE_LINE", "CPUS_PER_NODE", "DRIVER_STOPS", "GPUS_PER_NODE",
           "HEAD_IP", "KINDS", "REPO", "RESUME_MARK", "SWITCH_LINE", "TMPFS_SIZE", "TRIAL_OVERRIDES", "WORKER_IP",
           "Check", "Fault", "History", "Injected", "Schedule", "Session", "Soak", "Tee", "TuneTrial",
           "TwoNodeCluster", "check_answer", "check_budget", "check_history", "check_no_retraining",
           "check_rows_once", "check_switch_once", "check_trial_index_once", "check_validation_kept", "fault_checks",
           "load_history", "main", "plan_schedule", "provenance", "report", "soak_main", "switch_lines",
           "tune_retries"]


def main(argv=None) -> int:
    """The command line: the soak, or with ``--check RUN_DIR`` the history checks alone."""
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
    """The soak: plan the faults, run the search under them, check its history, report, clean up."""
    started = time.time()
    write_opening(args, out)
    schedule = plan_schedule(args.minutes, args.seed, every_kind=args.every_kind)
    write_plan(schedule, args.seed, out)
    work = Path(tempfile.mkdtemp(prefix="kgtchaos", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    soak = Soak(schedule, work, out, args.keep)
    history: list[Check] = []
    try:
        soak.setup()
        soak.run(deadline_s=args.minutes * 60 * 2.5 + 900)
        soak.stop_cluster()
        history = soak.check()
    except BaseException as exc:
        soak.failed(exc)
        if not isinstance(exc, Exception):
            raise
    finally:
        kept = soak.clean_up()
    ok = report(soak, history, out)
    if not ok:
        write_session_tails(soak, out)
    out.write(f"wall time {(time.time() - started) / 60:.1f} minutes; "
              + (f"work folder kept: {work} (run directory {kept})\n" if args.keep else "work folder removed\n"))
    if not args.keep:
        remove(work)
    return 0 if ok else 1


def remove(work: Path) -> None:
    """The work folder removed (twice: Ray may still write there)."""
    shutil.rmtree(work, ignore_errors=True)
    time.sleep(2)  # a Ray process exiting late may still create its session folder
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
