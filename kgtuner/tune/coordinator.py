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
own entries (KGTuner: the stage-2 candidates). Its fault paths (stop signals, a full disk, a dead Ray,
Tune's log filter) are :mod:`kgtuner.tune.faults`; its resume paths (reconcile with Tune, adopt rows,
the restored searcher, a larger budget) are :mod:`kgtuner.tune.resume`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from kgtuner.cluster.resources import ResourcePlan, plan_resources
from kgtuner.tune import events
from kgtuner.tune.budget import BudgetClock
from kgtuner.tune.faults import ExperimentInterrupted, Faults
from kgtuner.tune.outputs import experiment_summary, write_outputs
from kgtuner.tune.report import METRIC, MODE, STATUSES, TrialReport, split_config
from kgtuner.tune.results import ResultsStore, make_row
from kgtuner.tune.resume import Resume, resumed_settings
from kgtuner.tune.run_dir import (SEARCH_DIR, STATE_FILE, RunDirLock, atomic_json, check_run_dir, fingerprint,
                                  reserve_space, write_overrides)
from kgtuner.tune.seeds import retrain_seeds, train_seed
from kgtuner.tune.settings import ExperimentSettings
from kgtuner.tune.progress import configure_tune, trial_dirname
from kgtuner.tune.trial_values import check_trial_values

__all__ = ["Coordinator", "ExperimentInterrupted", "run_experiment", "check_run_dir", "fingerprint", "STATE_FILE"]

#: Longest wait for the first trial to be ready before the budget clock starts anyway (seconds).
STARTUP_WAIT_S = 120.0
class Coordinator(Faults, Resume):
    """Runs one experiment in ``run_dir`` (fresh or resumed) and writes its outputs there; the live
    :class:`~kgtuner.tune.events.Driver` of the search while it runs. Its fault paths are
    :class:`~kgtuner.tune.faults.Faults`, its resume paths :class:`~kgtuner.tune.resume.Resume`.

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
        settings, self.extension = resumed_settings(settings, saved, self.run_dir)
        self.settings = settings
        self.strategy = settings.make_strategy()
        self._persist = saved is not None  # a fresh run writes its state once the search starts
        self._init_resume()
        self.state: dict[str, Any] = saved or self._initial_state()
        self._init_faults()
        self.state["sessions"] = int(self.state.get("sessions", 0)) + 1
        self.clock: BudgetClock | None = None  # starts when the first trial is ready to train
        self.store = ResultsStore.load(self.run_dir) if saved else ResultsStore(self.run_dir)
        self.live: dict[str, dict] = {}
        self.rowed_at_report: set[str] = set()  # trials whose row was written at their final report, this session
        self.early_stopped: dict[str, events.TrialEarlyStopped] = {}  # until the trial is recorded
        self._search_finished = False
        self._start_unix: dict[str, float] = {}
        self._last_save = 0.0
        self._deadline_key: str | None = None  # where trials read the stage deadlines (kgtuner.tune.deadlines)
        self._search_begin = time.monotonic()
        self.slots, self.resources, self.ray_info, self.plan = 1, {}, None, ResourcePlan({}, 1)
        self.gauges = ExperimentMetrics(settings.name)
        self.answer = AnswerModels(settings, self.run_dir)  # the answer's trained model; answer.keep checked here

    # ------------------------------------------------------------------ the story of a run
    def run(self) -> dict:
        """Run the experiment to the end of its budget; return the summary dict.

        Raises :class:`ExperimentInterrupted` when stopped early (Ctrl+C, SIGTERM); the run directory then
        holds everything needed for ``resume=true``. Releases the run directory's lock at the end.
        """
        events.activate(self)
        try:
            with self.faults_as_errors():  # a stop: ExperimentInterrupted; a full disk: DiskFull
                self._reconcile()  # a resume: the rows, the state and the clock agree with Tune's saved state
                full, space = self._prepare()
                self._connect()
                graph_refs = self._put_graphs(full)
                self._arm_clock()
                self._continue_budget()  # a larger budget, or one a session ended under before Tune saved
                if not self.state.get("search_done"):
                    self._search(graph_refs, space)
                return self._finish(graph_refs)
        finally:
            self._stand_down()  # the state saved, the lock released, a local Ray stopped: whatever the outcome

    def _prepare(self):
        """The full graph, the strategy's graphs and notes, its space, the values every trial would get."""
        from kgtuner.data.from_config import load_graph

        t0 = time.perf_counter()
        full = load_graph(self.settings.data)
        self.strategy.prepare(full)
        self.log(f"data: {full.name}: {full.num_entities} entities, {full.num_relations} relations, "
                 f"{len(full.train)} train triples{self.strategy.data_note()} ({time.perf_counter() - t0:.1f}s)")
        for note in self.strategy.notes():
            self.log(note)
        space = self.strategy.space(full.name)
        for warning in check_trial_values(self.settings, space):  # a value every trial would fail on: refused here
            self.log(f"warning: {warning}")
        return full, space

    def _connect(self) -> None:
        """Start or join Ray, guard the driver against its faults, plan each trial's resources and the slots."""
        from kgtuner.cluster.ray_cluster import connect_ray

        self.ray_info = connect_ray(self.settings.cluster, print_banner=bool(self.verbose))
        self._guard_process()  # the Ray watcher, SIGTERM as Ctrl+C
        plan = plan_resources(self.settings.trial, num_gpus=self.ray_info.num_gpus, num_cpus=self.ray_info.num_cpus,
                              packed=self.strategy.packed_stages)  # trial.stage1_per_gpu: stages sharing GPUs
        self.resources, self.slots, self.plan = plan.resources, plan.slots, plan
        self.strategy.packing = dict(plan.stages)  # their own slots and resources (the searcher's per-stage caps)
        for note in plan.notes:
            self.log(note)

    def _put_graphs(self, full) -> dict:
        """The strategy's graphs in Ray's object store, by key (the full graph once)."""
        import ray

        full_ref = ray.put(full.to_arrays())
        return {key: full_ref if graph is full else ray.put(graph.to_arrays())
                for key, graph in self.strategy.graphs().items()}

    def _arm_clock(self) -> None:
        """The budget clock, stopped until the first trial is ready to train (:meth:`_maybe_start_clock`)."""
        self.clock = BudgetClock(offset=float(self.state["elapsed_s"]), running=False)
        self._search_begin = time.monotonic()

    def _search(self, graph_refs: dict, space) -> None:
        """One ``Tuner.fit`` of the strategy's searcher (new, or restored) until it answers FINISHED."""
        self._deadline_key = f"{self.run_dir.name}-{uuid.uuid4().hex[:12]}"
        trainable = self._trainable(graph_refs, answer=self.answer.trial_args(self))
        self.log(self.strategy.describe(Path(space.name).stem, self.slots, self.resources))
        self.gauges.set_stage(self.strategy.stage_gauge(int(self.state["stage"])))
        self._search_finished = self._restored_finished
        tuner = self._tuner(trainable, space)
        self._begin()  # every check passed: from here on the directory holds the experiment
        self._fit(tuner)  # returns once the search finished; a stop, a full disk or a failed search raises
        self.state["search_done"] = True
        self.state["search_elapsed_s"] = round(self.elapsed(), 3)
        self.save_state()

    def _finish(self, graph_refs: dict) -> dict:
        """Retrain the answer with ``final.seeds`` (once), mark the run done and write its outputs."""
        if self.settings.final_seeds and not self.state.get("final"):
            self.state["final"] = self._retrain_final(graph_refs)
            self.save_state()
        self.state["done"] = True
        self.save_state()
        return self.write_outputs()

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
        with self._writing(STATE_FILE):  # a full disk: the previous state file stays whole
            atomic_json(self.run_dir / STATE_FILE, self.state)
        self._last_save = time.monotonic()

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
        if report.done and report.status is not None:  # its final report: the row now, not at Tune's end event
            self._record_row(trial, report, None)  # (a driver killed between the two loses no finished trial)
            self.rowed_at_report.add(trial.trial_id)

    def on_trial_end(self, trial, error: str | None) -> None:
        self._maybe_start_clock(force=True)
        report = TrialReport.from_dict(self.live.pop(trial.trial_id, None) or getattr(trial, "last_result", None))
        if error is not None or trial.trial_id not in self.rowed_at_report:  # a failure after it replaces the row
            self._record_row(trial, report, error)
        self.early_stopped.pop(trial.trial_id, None)

    def _record_row(self, trial, report: TrialReport, error: str | None) -> None:
        tid = trial.trial_id
        if self._lost_to_full_disk(tid, error, report):  # no row: a resume runs it again
            return
        hp, meta = split_config(dict(trial.config))
        stage = int(meta.get("stage", 1))
        status, err = ("failed", error) if error is not None else (report.status or "ok", report.error)
        if status not in STATUSES:
            status = "failed"
        early = self.early_stopped.get(tid)
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
        with self._writing(self.store.path.name):  # a full disk: trials.parquet stays as it was
            self.store.add(row)
        self.save_state()
        best = self.store.best(stage)
        shown = "-" if row["valid_mrr"] is None else f"{row['valid_mrr']:.4f}"
        status = status if rung is None else f"stopped by ASHA at rung {rung}"
        self.log(f"stage {stage} trial {tid} {status}: valid_mrr={shown} | "
                 + (f"best so far {best['valid_mrr']:.4f} ({best['trial_id']}) | " if best else "")
                 + f"t={self.elapsed():.1f}s" + (f" | error: {err}" if err else ""))

    # ------------------------------------------------------------------ the search
    def _tuner(self, trainable, space):
        """A new Tuner for the search, or the interrupted one restored from ``run_dir/search`` (a resume)."""
        from ray import tune

        from kgtuner.tune.answer_model import AnswerCallback
        from kgtuner.tune.early_stop import RunDirFIFOScheduler
        from kgtuner.tune.progress import ProgressCallback
        from kgtuner.tune.trackers import callbacks as tracker_callbacks

        configure_tune()
        # Tune queues only one pending trial at a time for a custom searcher unless told otherwise
        # (it reads this at Tuner.fit): let every slot's first trial start at once.
        os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", str(self.plan.max_slots))
        restored = self._restored_tuner(trainable)  # a resume: the interrupted search
        if restored is not None:
            return restored
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
                name=SEARCH_DIR, storage_path=str(self.run_dir),  # + MLflow / W&B (tracker=...)
                callbacks=[ProgressCallback(), AnswerCallback(), *tracker_callbacks(self.settings, self.run_dir)],
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
        return make_trainable(graphs=graph_refs, stages=stages, model=s.model_name,
                              resources=self.plan.trial_resources(),  # per stage: trial.stage1_per_gpu
                              checkpoint_every_s=s.trial.checkpoint_every_s, inject_failures=s.trial.inject_failures,
                              experiment=s.name, deadline_key=self._deadline_key if deadlines else None,
                              answer=answer, experiment_seed=s.seed)

    def _initial_state(self) -> dict:
        return {"version": 1, "stage": 1, "elapsed_s": 0.0, "started": {}, "done": False, "final": None,
                "fingerprint": fingerprint(self.settings), "sessions": 0, **self.strategy.initial_state()}

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
        configure_tune()
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


def run_experiment(settings: ExperimentSettings, run_dir: str | os.PathLike, **kwargs) -> dict:
    """Validate the run directory, run the experiment and return its summary."""
    return Coordinator(settings, run_dir, **kwargs).run()
