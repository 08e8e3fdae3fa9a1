"""The coordinator: a strategy-agnostic driver of one search experiment on Ray Tune within a budget.

What it does, for every search: check the run directory (fresh, or ``resume=true``); load the full
graph (``data`` group) and hand it to the strategy of ``search.name``
(:mod:`kgtuner.tune.strategies`), which samples whatever else it trains on and declares its stages,
searcher and scheduler; start Ray; run one ``Tuner.fit`` (experiment folder ``search`` in the run
directory) with the strategy's searcher; keep the budget clock and publish the stage deadlines to the
trials; turn Tune's trial events into trials.parquet rows; take the search's typed events
(:mod:`kgtuner.tune.events`); write the outputs (trials.parquet, summary.json, best_config.yaml,
search_curve.png, the answer's model files).

The coordinator owns the budget: the search ends by its searcher answering FINISHED, never by
``time_budget_s`` or a stopper, so an interrupted run stays resumable with ``Tuner.restore``.
``kgtuner_state.json`` holds the stage, the active seconds used so far (the budget clock counts only
time the search was running, from the moment the first trial is ready to train) and the strategy's
own entries (KGTuner: the stage-2 candidates).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import dataclasses

import numpy as np

from kgtuner.errors import KGTunerError
from kgtuner.tune import events
from kgtuner.tune.budget import BudgetClock
from kgtuner.tune.outputs import experiment_summary, write_outputs
from kgtuner.tune.report import METRIC, MODE, STATUSES, TrialReport, split_config
from kgtuner.tune.results import ResultsStore, make_row
from kgtuner.tune.run_dir import (SEARCH_DIR, SNAPSHOT_KEY, STATE_FILE, DiskFull, RunDirLock, RunDirRefused,
                                  atomic_json, check_run_dir, disk_full_error, disk_full_message, fingerprint,
                                  budget_extension, extend_overrides, is_disk_full_text, mark_trials_finished,
                                  release_space, remove_temp_files, reopen_search, reserve_space, resume_command,
                                  tune_snapshot, write_overrides)
from kgtuner.tune.seeds import retrain_seeds, train_seed
from kgtuner.tune.settings import ExperimentSettings
from kgtuner.tune.trial_values import check_trial_values

__all__ = ["Coordinator", "ExperimentInterrupted", "run_experiment", "check_run_dir", "fingerprint", "STATE_FILE"]

#: State entries a resume takes from the state file, not from the snapshot saved with Tune's state: the
#: settings the run was checked against and the budget it has (a budget extended in a session that ended
#: before Tune saved again stays extended).
KEPT_STATE = ("fingerprint", "sessions", "budget_base", "budget_extensions")
#: Longest wait for the first trial to be ready before the budget clock starts anyway (seconds).
STARTUP_WAIT_S = 120.0
#: Environment for Tune in the driver (set unless the user set them).
TUNE_ENV = {"RAY_AIR_NEW_OUTPUT": "0", "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0"}


def _configure_tune() -> None:
    """Tune's classic live table; ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1`` turns Tune's per-trial loggers
    off (trials.parquet is the durable record) and then silences the result grid's warning."""
    import logging

    for key, value in TUNE_ENV.items():
        os.environ.setdefault(key, value)
    if os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS") == "1":
        logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)


def trial_dirname(trial) -> str:
    """Short trial folder names (Tune's default repeats the whole configuration)."""
    return f"trial_{trial.trial_id}"


class ExperimentInterrupted(KGTunerError):
    """The run stopped before its budget ended (Ctrl+C); it can be resumed."""


class Coordinator:
    """Runs one experiment in ``run_dir`` (fresh or resumed) and writes its outputs there; the live
    :class:`~kgtuner.tune.events.Driver` of the search while it runs.

    It holds the run directory's lock (:class:`~kgtuner.tune.run_dir.RunDirLock`) from construction to
    the end of :meth:`run` (or :meth:`close`), and writes nothing there (no state file, no
    ``search/``) until every setting, the data, the space and the cluster values passed their
    checks: a refused launch leaves the directory as it found it. ``overrides``: the launch's
    command-line overrides, kept once in ``kgtuner_overrides.yaml``.
    """

    def __init__(self, settings: ExperimentSettings, run_dir: str | os.PathLike, *, verbose: int = 1,
                 out=None, overrides: list[str] | None = None):
        self.run_dir = Path(run_dir).resolve()
        self.lock = RunDirLock(self.run_dir).acquire()  # before anything in the directory is read
        try:
            self._init(settings, verbose, out, overrides)
        except BaseException:
            self.lock.release()
            raise

    def _init(self, settings: ExperimentSettings, verbose: int, out, overrides) -> None:
        from kgtuner.cluster.metrics import ExperimentMetrics
        from kgtuner.tune.answer_model import AnswerModels

        self.verbose = verbose
        self.out = out if out is not None else sys.stdout  # resolved now: sys.stdout may be replaced after import
        self.overrides = None if overrides is None else [str(o) for o in overrides]
        if self.lock.note:
            self.log(self.lock.note)
        saved = check_run_dir(settings, self.run_dir)
        # resume=true with a larger budget: the search continues under it, its stage split kept (Budget.extended)
        self.extension = budget_extension(settings, saved, self.run_dir) if saved else None
        if self.extension is not None:
            settings = dataclasses.replace(settings, budget=self.extension)
        elif saved and saved.get("budget_base") is not None:  # a run extended before: its split stays the first's
            settings = dataclasses.replace(settings, budget=dataclasses.replace(settings.budget,
                                                                                base=float(saved["budget_base"])))
        self.settings = settings
        self.strategy = settings.make_strategy()
        self._persist = saved is not None  # a fresh run writes its state once the search starts
        self._tune_restored: bool | None = None  # None: no restore expected; False/True: Tune's restore done?
        self.state: dict[str, Any] = saved or self._initial_state()
        self._snapshot = None  # the saved Tune experiment a resume continues (reconcile_with_tune)
        self._adoptions: list[dict] = []  # rows kept for the restored searcher (on_searcher_restored)
        self._disk_full: tuple[BaseException | None, str] | None = None  # (error, what was written): stopping
        self._fitting = False  # inside Tuner.fit (a stop goes through Tune's SIGINT handler)
        self._stop_requested = False
        self._stopped = None  # threading.Event: run() has ended (the stop watcher stands down)
        self._restored_finished = False
        self._budget_grown = False  # Tune's snapshot predates a budget extension (reconcile_with_tune)
        self.state["sessions"] = int(self.state.get("sessions", 0)) + 1
        self.clock: BudgetClock | None = None  # starts when the first trial is ready to train
        self.store = ResultsStore.load(self.run_dir) if saved else ResultsStore(self.run_dir)
        self.live: dict[str, dict] = {}
        self.early_stopped: dict[str, events.TrialEarlyStopped] = {}  # until the trial is recorded
        self._search_finished = False
        self._start_unix: dict[str, float] = {}
        self._last_save = 0.0
        self._deadline_key: str | None = None  # where trials read the stage deadlines (kgtuner.tune.deadlines)
        self._search_begin = time.monotonic()
        self.slots, self.resources, self.ray_info = 1, {}, None
        self.gauges = ExperimentMetrics(settings.name)
        self.answer = AnswerModels(settings, self.run_dir)  # the answer's trained model; answer.keep checked here

    # ------------------------------------------------------------------ persistence, the Driver protocol
    def elapsed(self) -> float:
        """Active seconds of search so far (0 before the clock starts)."""
        return self.clock.elapsed() if self.clock is not None else float(self.state["elapsed_s"])

    def running(self) -> int:
        return len(self.live)

    def save_state(self) -> None:
        if not self._persist:  # a fresh run before its search started: nothing in the directory yet
            return
        self.state["elapsed_s"] = self.elapsed()
        try:
            atomic_json(self.run_dir / STATE_FILE, self.state)
        except OSError as exc:
            if disk_full_error(exc) is None:
                raise
            self._on_disk_full(exc, STATE_FILE)  # the previous state file stays whole
        self._last_save = time.monotonic()

    # ------------------------------------------------------------------ a full disk
    def _on_disk_full(self, exc: BaseException | None, what: str) -> None:
        """A write to the run directory failed for want of space. During the search: stop it the way Ctrl+C
        does (Tune's own clean stop; once) and end with one line when Tune has stopped (:class:`DiskFull`);
        elsewhere raise it now. The files written before stay whole (every write goes through a temporary
        file, removed when it fails)."""
        import signal

        if self._disk_full is None:
            self._disk_full = (exc, what)
            freed = release_space(self.run_dir)  # room for Tune's last checkpoint and the state file
            self.log(f"the disk of {self.run_dir} is full (writing {what}): stopping the search"
                     + (" (the space kgtuner set aside for this is freed)" if freed else ""))
        if not self._fitting:
            raise self._disk_full_error()
        if not self._stop_requested:
            self._stop_requested = True
            signal.raise_signal(signal.SIGINT)  # Tune's SIGINT handler: stop, as on Ctrl+C

    def _tune_log_filter(self):
        """A filter for Tune's loggers during the search: a record of a full disk (a trial that could not write
        its checkpoint, an experiment checkpoint that could not be written) stops the search at once and is
        not printed -- the search ends with its one line instead of a traceback per failed write."""
        driver = self

        class DiskFullRecords(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                exc = record.exc_info[1] if record.exc_info else None
                if disk_full_error(exc) is None and not is_disk_full_text(str(exc) if exc is not None else None):
                    return True
                driver._on_disk_full(disk_full_error(exc), f"Tune's files in {driver.run_dir / SEARCH_DIR}")
                return False

        return DiskFullRecords()

    def _disk_full_error(self) -> DiskFull:
        exc, what = self._disk_full or (None, "the run directory")
        remove_temp_files(self.run_dir, os.getpid())
        resumable = self._persist and (self.run_dir / STATE_FILE).exists()
        return DiskFull(disk_full_message(self.run_dir, what, exc, resumable=resumable))

    def snapshot(self) -> dict:
        """The state as of now, saved by Tune with its own experiment state (``ProgressCallback.get_state``):
        a resume takes the stage, the budget used and the strategy's entries from the same moment as the
        trials and the searcher it restores, so no second is counted twice."""
        return json.loads(json.dumps({**self.state, "elapsed_s": round(self.elapsed(), 3),
                                      "search_finished": self._search_finished}, default=str))

    def on_tune_restored(self, snapshot: dict | None) -> None:
        """Tune restored its experiment (``ProgressCallback.set_state``)."""
        if self._tune_restored is not None:
            self._tune_restored = True

    def log(self, msg: str) -> None:
        if self.verbose:
            print(f"[kgtuner] {msg}", file=self.out, flush=True)

    def notify(self, event: events.SearchEvent) -> None:
        """An event of the search: the driver's own part, then the strategy's (log lines, state entries)."""
        if isinstance(event, events.SearchFinished):
            self._search_finished = True
        elif isinstance(event, events.SearchFailed):
            self.state["error"] = event.message
        elif isinstance(event, events.TrialEarlyStopped):
            self.early_stopped[event.trial_id] = event
        elif isinstance(event, events.StageStarted):
            self.state["stage"] = event.stage
            self.save_state()
            self.gauges.set_stage(self.strategy.stage_gauge(event.stage))
        self.strategy.on_event(event, self)

    def early_stop_of(self, trial_id: str) -> events.TrialEarlyStopped | None:
        return self.early_stopped.get(trial_id)

    # ------------------------------------------------------------------ Tune events -> rows
    def _maybe_start_clock(self, force: bool = False) -> None:
        """Start the budget clock when the first trial is ready to train (or at the first trial
        event, ``force``; or after ``STARTUP_WAIT_S``) and publish the stage deadlines to the trials."""
        if self.clock is None or self.clock.running or self._deadline_key is None:
            return
        from kgtuner.tune import deadlines

        since = None
        try:
            since = deadlines.ready_since(self._deadline_key)
        except Exception:  # noqa: BLE001 - store unreachable: fall back to the first trial event
            force = True
        waited = time.monotonic() - self._search_begin
        if since is None and not force and waited < STARTUP_WAIT_S:
            return
        self.clock.start(since_unix=since)
        try:
            deadlines.publish(self._deadline_key, {k: self.clock.unix_time_at(spec.end_s)
                                                   for k, spec in self.strategy.stages().items()})
        except Exception as exc:  # noqa: BLE001
            self.log(f"warning: could not publish the stage deadlines to the trials ({exc}); "
                     "running trials stop only when the search ends")
        startup = (time.time() - since) if since is not None else 0.0
        self.log(f"budget clock starts: the first trial was ready after {max(0.0, waited - startup):.1f}s of "
                 "worker start-up (not charged to the budget)")

    def on_step_begin(self) -> None:
        """Before each step of Tune's loop (the first one: before Tune asks the searcher for trials or saves
        its experiment state): a resume whose saved experiment Tune did not restore stops here."""
        if self._tune_restored is False:  # Tune logged "Failed to restore the run state" and started afresh
            raise RunDirRefused(
                f"Ray Tune could not restore the saved experiment in {self.run_dir / SEARCH_DIR} (see its "
                f"'Failed to restore the run state' above); the finished trials are in {self.store.path}. Start a "
                "fresh search in another hydra.run.dir, or move search/, kgtuner_state.json and trials.parquet "
                "away to reuse this directory")

    def on_tick(self, trials) -> None:
        self._maybe_start_clock()
        if time.monotonic() - self._last_save >= 2.0:
            self.save_state()
            budget = self.settings.budget
            self.gauges.budget_used(self.elapsed() / budget.end_s if budget.timed else len(self.store) / budget.trials)
            failed = sum(1 for r in self.store.rows() if r["status"] == "failed")
            self.gauges.trials(running=len(self.live), finished=len(self.store) - failed, failed=failed)

    def on_trial_start(self, trial) -> None:
        tid = trial.trial_id
        self.state["started"].setdefault(tid, round(self.elapsed(), 3))
        self._start_unix.setdefault(tid, time.time())
        self.live.setdefault(tid, {})

    def on_trial_result(self, trial, result: dict) -> None:
        self._maybe_start_clock(force=True)
        self.live[trial.trial_id] = dict(result)
        report = TrialReport.from_dict(result)
        if report.valid_mrr is not None:
            self.gauges.best_mrr(report.valid_mrr, stage=int(trial.config.get("stage", 1)))

    def on_trial_end(self, trial, error: str | None) -> None:
        self._maybe_start_clock(force=True)
        tid = trial.trial_id
        report = TrialReport.from_dict(self.live.pop(tid, None) or getattr(trial, "last_result", None))
        if is_disk_full_text(error) or (report.failed and is_disk_full_text(report.error)):
            # the trial could not write its checkpoint: the disk, not its configuration, failed -- no row, so a
            # resume (once there is space) runs it again
            self.early_stopped.pop(tid, None)
            self._on_disk_full(None, f"trial {tid}'s checkpoint in {self.run_dir / SEARCH_DIR}")
            return
        hp, meta = split_config(dict(trial.config))
        stage = int(meta.get("stage", 1))
        status, err = ("failed", error) if error is not None else (report.status or "ok", report.error)
        if status not in STATUSES:
            status = "failed"
        early = self.early_stopped.pop(tid, None)
        rung = None if early is None or error is not None else early.rung
        if rung is not None:  # stopped by the early-stopping scheduler (ASHA): partly trained, no test metrics
            status, err = "stopped", None
        # end_s: when the trial itself finished (its final report), not when Tune got round to it
        end_s = self.elapsed()
        if report.ended_unix is not None:
            end_s -= min(max(0.0, time.time() - report.ended_unix), end_s)
        start_s = self.state["started"].get(tid)
        if start_s is not None:
            end_s = max(end_s, float(start_s))
        timing = dict(report.timing)
        if report.started_unix is not None and tid in self._start_unix:
            timing["launch_s"] = max(0.0, report.started_unix - self._start_unix[tid])
        row = make_row(tid, stage, hp, status=status, valid=report.valid, test=report.test, error=err,
                       start_s=start_s, end_s=end_s, node=report.node, node_ip=report.node_ip, gpu=report.gpu,
                       graph=report.graph, steps=report.step if report.step or report.graph else None,
                       trial_index=meta.get("trial_index"), timing=timing, rung=rung,
                       train_seed=report.train_seed if report.train_seed is not None
                       else train_seed(hp, meta.get("trial_index"), self.settings.seed))
        try:
            self.store.add(row)
        except OSError as exc:
            if disk_full_error(exc) is None:
                raise
            self._on_disk_full(exc, self.store.path.name)  # trials.parquet stays as it was
        self.save_state()
        best = self.store.best(stage)
        shown = "-" if row["valid_mrr"] is None else f"{row['valid_mrr']:.4f}"
        status = status if rung is None else f"stopped by ASHA at rung {rung}"
        self.log(f"stage {stage} trial {tid} {status}: valid_mrr={shown} | "
                 + (f"best so far {best['valid_mrr']:.4f} ({best['trial_id']}) | " if best else "")
                 + f"t={self.elapsed():.1f}s" + (f" | error: {err}" if err else ""))

    # ------------------------------------------------------------------ the search
    def _tuner(self, trainable, space):
        """A new Tuner for the search, or the interrupted one restored from ``run_dir/search``."""
        from ray import tune

        from kgtuner.tune.answer_model import AnswerCallback
        from kgtuner.tune.early_stop import RunDirFIFOScheduler
        from kgtuner.tune.progress import ProgressCallback

        _configure_tune()
        # Tune queues only one pending trial at a time for a custom searcher unless told otherwise
        # (it reads this at Tuner.fit): let every slot's first trial start at once.
        os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", str(self.slots))
        path = self.run_dir / SEARCH_DIR
        if self._snapshot is not None and self._snapshot.path is not None and tune.Tuner.can_restore(str(path)):
            what = "search, its budget extended," if self.extension is not None else "interrupted search"
            self.log(f"resuming the {what} in {path} (stage {self.state['stage']}, "
                     f"{self.elapsed():.1f}s of the budget used, {len(self.store)} trials recorded)")
            return tune.Tuner.restore(str(path), trainable=trainable, resume_unfinished=True,
                                      resume_errored=False, restart_errored=False)
        reporter = tune.CLIReporter(
            metric_columns={"valid_mrr": "valid_mrr", "step": "step", "gpu": "gpu"},
            parameter_columns={"stage": "stage", "batch_size": "batch", "dim": "dim", "loss": "loss",
                               "negatives": "neg", "lr": "lr"},
            max_report_frequency=15, sort_by_metric=False)
        return tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=self.strategy.searcher(space, self.slots),  # limits concurrency itself
                # FIFO without early stopping; either keeps a resumed copy's new trials in its run directory
                scheduler=self.strategy.scheduler() or RunDirFIFOScheduler(), metric=METRIC, mode=MODE, num_samples=-1,
                reuse_actors=True, trial_dirname_creator=trial_dirname),
            run_config=tune.RunConfig(
                name=SEARCH_DIR, storage_path=str(self.run_dir), callbacks=[ProgressCallback(), AnswerCallback()],
                failure_config=tune.FailureConfig(max_failures=self.settings.trial.max_failures),
                checkpoint_config=self.answer.checkpoint_config(),  # best 2 per trial by valid_mrr
                verbose=1 if self.verbose else 0, progress_reporter=reporter),
        )

    def _trainable(self, graph_refs: dict, *, deadlines: bool = True, answer: dict | None = None):
        from kgtuner.tune.trainable import make_trainable

        s = self.settings
        stages = {k: {"graph_key": spec.graph_key, "controls": spec.controls,
                      "deadline_unix": self.clock.unix_time_at(spec.end_s) if deadlines else math.inf}
                  for k, spec in self.strategy.stages().items()}
        return make_trainable(graphs=graph_refs, stages=stages, model=s.model_name, resources=self.resources,
                              checkpoint_every_s=s.trial.checkpoint_every_s, inject_failures=s.trial.inject_failures,
                              experiment=s.name, deadline_key=self._deadline_key if deadlines else None,
                              answer=answer, experiment_seed=s.seed)

    def reconcile_with_tune(self) -> None:
        """Before a resume: make the rows, the state and the budget clock agree with the newest Tune
        experiment state that ``Tuner.restore`` will continue from.

        Tune saves its experiment state (trials, searcher) every few seconds (at least 10 s apart),
        trials.parquet and kgtuner_state.json change at every trial end; after a crash (``kill -9``, Ray's
        processes killed under the driver) the rows may hold trials the saved searcher has not seen
        finish: it was saved while they ran, or before they started. Their rows are finished trials with
        their results, so they are **kept**: Tune is told not to run them again (their status in its saved
        state becomes TERMINATED), the restored searcher is given their results when Tune restores it
        (:meth:`on_searcher_restored`: ``MetaSearcher.adopt_finished``; a trial suggested after the save is
        counted as suggested, its ``trial_index`` never reused) and they count in the budget: the active
        seconds used are at least the end of the last of them. The stage and the strategy's entries come
        from the coordinator's snapshot saved with Tune's (``ProgressCallback``); the restored searcher
        re-announces what it redoes (e.g. the stage switch). Only a row the restored searcher cannot take
        (a searcher without ``add_evaluated_point`` support, e.g. TPE's for a trial it never suggested) is
        dropped, and the search runs another trial in its place. A damaged Tune file is refused here
        (:func:`~kgtuner.tune.run_dir.tune_snapshot`), before Tune would silently start an empty experiment.
        """
        self._snapshot = snap = tune_snapshot(self.run_dir)
        remove_temp_files(self.run_dir)  # of writes cut short (a killed driver, a full disk): we hold the lock
        if snap.path is None:
            if len(self.store) or float(self.state.get("elapsed_s") or 0.0) > 0:
                self.log(f"Tune saved no state of the interrupted search in {self.run_dir / SEARCH_DIR} (it stopped "
                         "within its first seconds): the search starts again from zero")
            dropped = self.store.keep_only(())
            keep = {k: self.state[k] for k in KEPT_STATE if k in self.state}
            self.state = {**self._initial_state(), **keep}
        else:
            dropped = []
            ahead = snap.unknown_to_searcher([r["trial_id"] for r in self.store.rows()])
            if snap.kgtuner_state is None or snap.searcher_trials is None:  # no searcher to give them to
                dropped = self.store.keep_only(set(snap.finished()) | {r["trial_id"] for r in self.store.rows()
                                                                       if r["trial_id"] not in ahead})
            if snap.kgtuner_state is not None:
                keep = {k: self.state[k] for k in KEPT_STATE if k in self.state}
                saved = dict(snap.kgtuner_state)
                # saved before a session that extended the budget ended: the restored searcher gets it again
                self._budget_grown = bool(self.state.get("budget_extensions")) and \
                    (saved.get("fingerprint") or {}).get("budget") != (self.state.get("fingerprint") or {}).get("budget")
                # the restored searcher answered FINISHED before that snapshot: it will not say so again
                self._restored_finished = bool(saved.pop("search_finished", False))
                self.state = {**saved, **keep}
                self._tune_restored = False  # until ProgressCallback.set_state says Tune restored its snapshot
            if ahead and not dropped:
                self._adopt_rows(snap, ahead)
        if dropped:
            ids = sorted(r["trial_id"] for r in dropped)
            self.log(f"{len(dropped)} trials.parquet row(s) were recorded after the last saved Tune state (the driver "
                     f"was killed?): dropped, those trials run again under the restored searcher: {', '.join(ids)}")
        if dropped or snap.path is None or self._adoptions:
            self.store.flush()
            self.save_state()

    def _adopt_rows(self, snap, ahead: list[str]) -> None:
        """Keep the rows of ``ahead`` (trials that finished after Tune's saved state, see
        :meth:`reconcile_with_tune`): Tune must not run them again, the budget counts them."""
        rows = [r for r in self.store.rows() if r["trial_id"] in set(ahead)]
        self._adoptions = rows
        rerun = [r["trial_id"] for r in rows if snap.trials.get(r["trial_id"]) not in (None, "TERMINATED", "ERROR")]
        if rerun:
            mark_trials_finished(snap.path, rerun)
        ends = [float(r["end_s"]) for r in rows if r.get("end_s") is not None]
        if ends:
            self.state["elapsed_s"] = max(float(self.state.get("elapsed_s") or 0.0), max(ends))
        self.log(f"{len(rows)} trial(s) finished after Tune's last saved state (the driver was stopped before Tune "
                 f"saved again): their rows are kept, the restored search takes their results and counts them in "
                 f"the budget ({self.state['elapsed_s']:.1f}s used); none runs again: "
                 + ", ".join(sorted(r["trial_id"] for r in rows)))

    def on_searcher_restored(self, searcher) -> None:
        """Tune restored the search's searcher (``MetaSearcher.restore``, before Tune's first step): give it the
        trials that finished after its state was saved (:meth:`reconcile_with_tune`). A row it cannot take is
        dropped (logged); the search then runs another trial instead."""
        if self.extension is not None or self._budget_grown:
            changed = searcher.extend_budget(self.strategy.searcher_budget())
            if not changed and getattr(searcher, "done", False):  # it had finished under this budget already
                self._search_finished = True
            self.log("the restored searcher continues under the larger budget: "
                     + (", ".join(f"{k} {old} -> {new}" for k, (old, new) in changed.items()) or "no field changed"))
        rows, self._adoptions = self._adoptions, []
        adopt = getattr(searcher, "adopt_finished", None)
        refused = []
        for row in rows:
            tid, stage = row["trial_id"], int(row["stage"])
            if row.get("rung") is not None:  # stopped by ASHA: the searcher looks the stop up (early_stop_of)
                self.early_stopped[tid] = events.TrialEarlyStopped(tid, int(row["rung"]), int(row.get("steps") or 0))
            try:
                ok = adopt is not None and bool(adopt(tid, stage, json.loads(row["config_json"]),
                                                      row.get("trial_index"), _row_report(row)))
            except Exception:  # noqa: BLE001 - the row is then dropped, as it was before rows were kept
                ok = False
            finally:
                self.early_stopped.pop(tid, None)
            if not ok:
                refused.append(tid)
        if refused:
            self.store.keep_only({r["trial_id"] for r in self.store.rows()} - set(refused))
            self.store.flush()
            self.log(f"{len(refused)} of those trials could not be given to the restored searcher "
                     f"({type(searcher).__name__}): their rows are dropped and the search runs other trials in their "
                     f"place: {', '.join(sorted(refused))}")

    def _initial_state(self) -> dict:
        return {"version": 1, "stage": 1, "elapsed_s": 0.0, "started": {}, "done": False, "final": None,
                "fingerprint": fingerprint(self.settings), "sessions": 0, **self.strategy.initial_state()}

    def _on_sigterm(self, signum, frame) -> None:
        """SIGTERM (``docker stop``, batch schedulers, ``ray job stop``) stops like Ctrl+C: a clean,
        resumable stop (Tune's SIGINT handler during the search, KeyboardInterrupt elsewhere).

        The resume command is printed at once, in case the stop is cut short (a local Ray started by
        ``kgtuner.cluster.ray_cluster`` blocks SIGTERM, so a stop signal sent to every process of the job
        reaches the driver only; where it still kills Ray, :meth:`_watch_ray` ends the driver at once)."""
        import signal

        if self.verbose:
            resume = (f"; if the stop is cut short, resume with: {resume_command(self.run_dir)}" if self._persist
                      else "")
            print(f"[kgtuner] SIGTERM received: stopping like Ctrl+C (the run stays resumable){resume}", file=self.out,
                  flush=True)
        signal.raise_signal(signal.SIGINT)

    def _watch_ray(self) -> None:
        """Until :meth:`run` ends: if the local Ray this driver started dies under it (its raylet or GCS killed:
        a stop sent by the kernel to every process of the job, the OOM killer, ``kill -9``), end the driver
        now with the resume command and exit code 130 instead of hanging on it -- Ray's clients wait 60 s for
        a dead GCS ("Failed to connect to GCS within 60 seconds") and then end the process with exit 1 and
        nothing printed. Nothing is lost: the rows and the state file are written at every trial end,
        Tune's last saved state is on disk, and a resume keeps every finished trial
        (:meth:`reconcile_with_tune`)."""
        import threading

        if self._stopped is not None or self.ray_info is None or not self.ray_info.started_here:
            return
        try:
            import ray

            node = ray._private.worker._global_node
            procs = [info.process for key in ("raylet", "gcs_server") for info in node.all_processes.get(key, [])]
        except Exception:  # noqa: BLE001 - no local node to watch
            return
        if not procs:
            return
        self._stopped = stopped = threading.Event()

        def watch() -> None:
            while not stopped.wait(0.25):
                if any(p.poll() is not None for p in procs):
                    break
            else:
                return  # run() ended
            if stopped.is_set():
                return
            print("[kgtuner] Ray's processes ended under the driver (killed?): the search cannot go on, the driver "
                  "stops now", file=self.out, flush=True)
            print(f"kgtuner: {self._interrupted_msg()}", file=sys.stderr, flush=True)
            os._exit(130)

        threading.Thread(target=watch, name="kgtuner-stop-watch", daemon=True).start()

    def run(self) -> dict:
        """Run the experiment to the end of its budget; return the summary dict.

        Raises :class:`ExperimentInterrupted` when stopped early (Ctrl+C, SIGTERM); the run directory then
        holds everything needed for ``resume=true``. Releases the run directory's lock at the end.
        """
        import signal
        import threading

        import ray

        from kgtuner.cluster.ray_cluster import connect_ray, shutdown_ray
        from kgtuner.cluster.resources import plan_resources
        from kgtuner.data.from_config import load_graph

        events.activate(self)
        old_sigterm = None
        try:
            s = self.settings
            if self._persist and (self.extension is not None or not self.state.get("search_done")):
                self.reconcile_with_tune()
            t0 = time.perf_counter()
            full = load_graph(s.data)
            self.strategy.prepare(full)
            self.log(f"data: {full.name}: {full.num_entities} entities, {full.num_relations} relations, "
                     f"{len(full.train)} train triples{self.strategy.data_note()} ({time.perf_counter() - t0:.1f}s)")
            for note in self.strategy.notes():
                self.log(note)
            space = self.strategy.space(full.name)
            for warning in check_trial_values(s, space):  # a value every trial would fail on: refused here
                self.log(f"warning: {warning}")
            self.ray_info = connect_ray(s.cluster, print_banner=bool(self.verbose))
            self._watch_ray()
            if threading.current_thread() is threading.main_thread():  # after ray.init, which sets its own
                old_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
            plan = plan_resources(s.trial, num_gpus=self.ray_info.num_gpus, num_cpus=self.ray_info.num_cpus)
            self.resources, self.slots = plan.resources, plan.slots
            for note in plan.notes:
                self.log(note)
            full_ref = ray.put(full.to_arrays())
            graph_refs = {key: full_ref if graph is full else ray.put(graph.to_arrays())
                          for key, graph in self.strategy.graphs().items()}
            # The clock starts when the first trial is ready to train: Ray's one-off worker start-up
            # (process, imports) is not charged to the search (see _maybe_start_clock).
            self.clock = BudgetClock(offset=float(self.state["elapsed_s"]), running=False)
            self._search_begin = time.monotonic()
            if self.extension is not None:
                self._extend_budget()
            elif self._budget_grown:  # an extension whose session ended before Tune saved under it
                self._restored_finished = False
                self.state.pop("search_done", None)
                reopen_search(self.run_dir)
            if not self.state.get("search_done"):
                self._deadline_key = f"{self.run_dir.name}-{uuid.uuid4().hex[:12]}"
                trainable = self._trainable(graph_refs, answer=self.answer.trial_args(self))
                self.log(self.strategy.describe(Path(space.name).stem, self.slots, self.resources))
                self.gauges.set_stage(self.strategy.stage_gauge(int(self.state["stage"])))
                self._search_finished = self._restored_finished
                tuner = self._tuner(trainable, space)
                self._begin()  # every check passed: from here on the directory holds the experiment
                log_filter = self._tune_log_filter()
                tune_loggers = [logging.getLogger(f"ray.tune.execution.{name}")
                                for name in ("tune_controller", "experiment_state")]
                for logger in tune_loggers:
                    logger.addFilter(log_filter)
                self._fitting = True
                try:
                    tuner.fit()
                finally:
                    self._fitting = False
                    for logger in tune_loggers:
                        logger.removeFilter(log_filter)
                if self._disk_full is not None:
                    raise self._disk_full_error()
                interrupted = bool(self.live) or not self._search_finished
                self.live.clear()
                if interrupted:
                    raise ExperimentInterrupted(self._interrupted_msg())
                if self.state.get("error"):
                    self._write_failed()
                    raise KGTunerError(self.state["error"])
                self.state["search_done"] = True
                self.state["search_elapsed_s"] = round(self.elapsed(), 3)
                self.save_state()
            if s.final_seeds and not self.state.get("final"):
                self.state["final"] = self._retrain_final(graph_refs)
                self.save_state()
            self.state["done"] = True
            self.save_state()
            return self.write_outputs()
        except KeyboardInterrupt:
            if self._disk_full is not None:
                raise self._disk_full_error() from None
            raise ExperimentInterrupted(self._interrupted_msg()) from None
        except Exception as exc:
            if isinstance(exc, KGTunerError) or (disk_full_error(exc) is None and not is_disk_full_text(str(exc))):
                raise
            if self._disk_full is None:  # e.g. an output file, or Tune's own write
                full = disk_full_error(exc)
                where = getattr(full, "filename2", None) or getattr(full, "filename", None)
                self._disk_full = (full, Path(where).name if where else "the run directory")
            raise self._disk_full_error() from None
        finally:
            try:
                release_space(self.run_dir)
                if self._stopped is not None:
                    self._stopped.set()
                if old_sigterm is not None:
                    signal.signal(signal.SIGTERM, old_sigterm)
                try:
                    self.save_state()
                except DiskFull:  # the previous state file stays whole
                    pass
            finally:
                events.deactivate(self)
                self.close()
                if self.ray_info is not None and self.ray_info.started_here:
                    try:
                        shutdown_ray()  # its processes at once, not a second each (Ray's stop)
                    except Exception as exc:  # noqa: BLE001 - never in place of the run's own outcome
                        logging.getLogger(__name__).warning("could not stop the local Ray at once (%s); Ray stops it "
                                                            "at exit", exc)

    def _extend_budget(self) -> None:
        """Every check passed and the search is about to continue under the larger budget: record the
        extension (``budget_extensions``, the fingerprint, the kept overrides), reopen a finished search (its
        answer, outputs and final retraining are redone at the end) and let Tune's restored generator suggest
        again (:func:`~kgtuner.tune.run_dir.reopen_search`)."""
        old = (self.state.get("fingerprint") or {}).get("budget") or {}
        new = self.settings.budget
        was_finished = bool(self.state.get("search_done") or self._restored_finished)
        entry = {"session": int(self.state.get("sessions", 0)), "unit": new.unit,
                 "from": old.get(new.unit), "to": new.seconds if new.timed else new.trials, "used_s": round(float(self.state["elapsed_s"]), 3),
                 "trials_recorded": len(self.store), "search_was": "finished" if was_finished else "interrupted"}
        self.state.setdefault("budget_base", new.split_amount)
        self.state["budget_extensions"] = [*self.state.get("budget_extensions", []), entry]
        self.state["fingerprint"] = fingerprint(self.settings)
        for key in ("search_done", "search_elapsed_s", "done", "final"):
            self.state.pop(key, None)
        self.state["final"] = None
        self._restored_finished = False
        reopened = reopen_search(self.run_dir)
        self.save_state()
        extend_overrides(self.run_dir, new)
        self.log(f"budget extended from {old.get(new.unit):g} to {new.amount:g} {new.unit} (the {entry['search_was']} "
                 f"search continues; {entry['used_s']:.1f}s used, {len(self.store)} trials recorded"
                 + ("; Tune's finished search reopened" if reopened else "") + f"): {self.strategy.extension_note()}")

    def _begin(self) -> None:
        """The search starts: from now on the run directory holds the experiment (state file, original
        overrides, Tune's ``search/``)."""
        if not self._persist:
            self._persist = True
            write_overrides(self.run_dir, self.overrides)
        reserve_space(self.run_dir)  # freed when the disk is full (_on_disk_full)
        self.save_state()

    def close(self) -> None:
        """Release the run directory's lock (at the end of :meth:`run`)."""
        self.lock.release()

    def _write_failed(self) -> None:
        """The search failed (e.g. every stage-1 trial failed): write trials.parquet and summary.json all the
        same -- the rows and their errors are the user's evidence -- with ``status: failed`` and the reason;
        the caller then raises the error (one line, exit 2)."""
        self.state["search_elapsed_s"] = round(self.elapsed(), 3)
        self.save_state()
        try:
            self.write_outputs()
        except Exception as exc:  # noqa: BLE001 - the search's own error is the one to report
            self.log(f"warning: could not write every output of the failed search: {type(exc).__name__}: {exc}")

    def _interrupted_msg(self) -> str:
        if not self._persist:
            return (f"stopped before the search started; nothing was saved in {self.run_dir}: run the same command "
                    "again to start it")
        return (f"experiment interrupted after {self.elapsed():.1f}s of its budget; {len(self.store)} "
                f"finished trials are saved in {self.run_dir}. Resume with: {resume_command(self.run_dir)}")

    def _retrain_final(self, graph_refs: dict) -> dict:
        """Retrain the answer's configuration with ``final.seeds`` seeds (its answer stage, no deadline), each
        other than the seed of the answer's own run (:func:`kgtuner.tune.seeds.retrain_seeds`)."""
        from ray import tune

        best = self.best_row()
        if best is None:
            return {}
        selected = best.get("train_seed")
        if selected is None:  # a row recorded before trials had their own seeds
            selected = train_seed(json.loads(best["config_json"]), best.get("trial_index"), self.settings.seed)
        seeds = retrain_seeds(selected, self.settings.final_seeds)
        self.log(f"final: retraining trial {best['trial_id']}'s configuration (trained with seed {selected}) "
                 f"with seeds {seeds}")
        param_space = {**json.loads(best["config_json"]), "seed": tune.grid_search(seeds),
                       "stage": self.strategy.answer_stage()}
        _configure_tune()
        tuner = tune.Tuner(self._trainable(graph_refs, deadlines=False), param_space=param_space,
                           tune_config=tune.TuneConfig(max_concurrent_trials=self.slots, reuse_actors=True,
                                                       trial_dirname_creator=trial_dirname),
                           run_config=tune.RunConfig(name="final", storage_path=str(self.run_dir), verbose=0))
        reports = [TrialReport.from_dict(r.metrics) for r in tuner.fit() if r.metrics]
        test = np.array([r.test.get("mrr", np.nan) for r in reports], dtype=float)
        valid = np.array([np.nan if r.valid_mrr is None else r.valid_mrr for r in reports], dtype=float)
        return {"seeds": len(seeds), "train_seeds": [r.train_seed for r in reports], "selected_seed": int(selected),
                "test_mrr_mean": float(np.nanmean(test)), "test_mrr_std": float(np.nanstd(test)),
                "valid_mrr_mean": float(np.nanmean(valid)), "valid_mrr_std": float(np.nanstd(valid)),
                "test_mrr": test.tolist(), "valid_mrr": valid.tolist()}

    # ------------------------------------------------------------------ outputs
    def best_row(self) -> dict | None:
        """The answer, as the strategy picks it."""
        return self.strategy.best_row(self.store)

    def summary(self) -> dict:
        """summary.json's content (:func:`kgtuner.tune.outputs.experiment_summary`)."""
        return experiment_summary(self)

    def write_outputs(self) -> dict:
        """trials.parquet, summary.json, best_config.yaml, search_curve.png and the printed table."""
        return write_outputs(self)


def _row_report(row: dict) -> dict:
    """The final report of a recorded trial (a trials.parquet row), as the searchers get it from Tune."""
    from kgtuner.tune.results import metrics_of

    report = TrialReport(stage=int(row["stage"]), step=int(row.get("steps") or 0),
                         valid=metrics_of(row, "valid") or {}, test=metrics_of(row, "test") or {}, done=True,
                         status=row.get("status"), error=row.get("error"), graph=row.get("graph"),
                         early_stop_rung=None if row.get("rung") is None else int(row["rung"]),
                         train_seed=None if row.get("train_seed") is None else int(row["train_seed"]))
    return report.to_dict()


def run_experiment(settings: ExperimentSettings, run_dir: str | os.PathLike, **kwargs) -> dict:
    """Validate the run directory, run the experiment and return its summary."""
    return Coordinator(settings, run_dir, **kwargs).run()
