"""The experiment's outputs at the end of a run: summary.json's content, and every file written from it.

``experiment_summary(driver)`` composes summary.json: the keys every search has (``status``: ok, or failed
with the reason in ``error`` -- a failed search still writes its outputs --, search, model, dataset,
the answer, trials per stage and status, budget (with the extensions of resumes that gave it more, and what
an extension means for the strategy), cluster, final retraining, early stopping, run_dir) and
the strategy's own (``Strategy.summary``: KGTuner's switch, GraSH's rounds). ``write_outputs(driver)``
writes trials.parquet, summary.json, best_config.yaml, search_curve.png, report.html and prints the summary table.
"""

from __future__ import annotations

import json

from kgtuner.tune.results import metrics_of, summary_table, write_summary

BEST_CONFIG_FILE = "best_config.yaml"


def packed_stages(plan) -> dict:
    """summary.json's ``cluster.stages``: the slots and resources of stages packed by ``trial.stage1_per_gpu``."""
    stages = getattr(plan, "stages", None) or {}
    per_gpu = getattr(plan, "per_gpu", None) or {}  # k, trial.stage1_per_gpu as resolved for each stage
    return {"stages": {str(s): {"slots": n, "per_gpu": per_gpu.get(s), "resources_per_trial": dict(r)}
                       for s, (r, n) in sorted(stages.items())}} if stages else {}


def experiment_summary(driver) -> dict:
    """summary.json's content for the coordinator ``driver`` (its settings, strategy, state and trials)."""
    s, strategy, store, state = driver.settings, driver.strategy, driver.store, driver.state
    best = strategy.best_row(store)
    counts = store.counts()
    extra = strategy.summary(state, store)
    asha = s.early_stop_settings()
    rungs = store.early_stopped()
    error = state.get("error")
    return {
        **extra,
        "status": "failed" if error else "ok", "error": error or None,
        "search": s.search_name, "two_stage": bool(strategy.two_stage), "model": s.model_name,
        "dataset": s.data.get("name") or s.data.get("path"),
        "best": None if best is None else {
            "trial_id": best["trial_id"], "stage": best["stage"], "config": json.loads(best["config_json"]),
            "valid": metrics_of(best, "valid"), "test": metrics_of(best, "test"),
            "graph": best.get("graph"), "train_seed": best.get("train_seed"),
            "from_subgraph": strategy.from_subgraph(best), "stage1_sizes": strategy.stage1_sizes(best)},
        "warnings": strategy.warnings(best),
        "trials_per_stage": {k: sum(v.values()) for k, v in counts.items()},
        "status_per_stage": counts,
        "budget": {"seconds": s.budget.seconds, "trials": s.budget.trials,
                   "used_s": round(float(state.get("search_elapsed_s", driver.elapsed())), 3),
                   "started_with": state.get("budget_base") or s.budget.amount,
                   "extensions": list(state.get("budget_extensions") or []),
                   "extension": strategy.extension_note(),
                   **extra.get("budget", {})},
        "cluster": {"slots": driver.slots, "resources_per_trial": driver.resources,
                    **packed_stages(getattr(driver, "plan", None))},
        "final": state.get("final") or None,
        "early_stop": None if asha is None else {
            "scheduler": "asha", **asha.as_dict(), "stopped": sum(sum(v.values()) for v in rungs.values()),
            "rungs": rungs},
        "run_dir": str(driver.run_dir),
    }


def write_outputs(driver) -> dict:
    """trials.parquet, summary.json, best_config.yaml, search_curve.png and the printed table; the summary."""
    from kgtuner.tune.best_config import write_best_config
    from kgtuner.tune.plots import CURVE_FILE, plot_search_curve

    driver.store.flush()
    summary = driver.answer.finish(experiment_summary(driver), driver)  # + the answer's model files
    for warning in summary["warnings"]:
        driver.log(f"WARNING: {warning}")
    write_summary(driver.run_dir, summary)
    if summary["best"] is not None:
        write_best_config(driver.run_dir / BEST_CONFIG_FILE, driver.settings, summary["best"]["config"],
                          driver.strategy.answer_controls(), seed=summary["best"]["train_seed"])
    budget = driver.settings.budget
    plot_search_curve(driver.store.rows(), driver.run_dir / CURVE_FILE,
                      switch_s=summary["stage_switch_s"], budget_s=budget.end_s if budget.timed else None,
                      title=f"{summary['search']}: {summary['dataset']} / {summary['model']}",
                      stage_labels=driver.strategy.stage_labels())
    if driver.verbose:
        print(summary_table(driver.store, summary), file=driver.out, flush=True)
        driver.log(f"outputs in {driver.run_dir}: trials.parquet, summary.json, {BEST_CONFIG_FILE}, {CURVE_FILE}")
    try:  # the report is read from the files above; it must never cost the run its outputs
        from kgtuner.analysis.report import write_report

        driver.log(f"report: {write_report(driver.run_dir)} (kgtuner report {driver.run_dir} rebuilds it)")
    except Exception as exc:  # noqa: BLE001
        driver.log(f"warning: report.html could not be written ({type(exc).__name__}: {exc}); every other output "
                   f"is in {driver.run_dir}")
    track_search(driver, summary)
    return summary


def track_search(driver, summary: dict) -> None:
    """The search's summary and the answer's files to the experiment tracker (``tracker=mlflow|wandb``), once the
    run directory holds them; a tracker that fails costs a warning, never the run's outputs."""
    from kgtuner.tune.trackers import log_search

    tracker = driver.settings.tracker
    if not tracker.on:
        return
    try:
        log_search(tracker, driver.run_dir, driver.settings.name, summary)
        driver.log(f"tracker={tracker.name}: the search's summary and the answer's files logged (run 'search')")
    except Exception as exc:  # noqa: BLE001 - the outputs are written; a tracker's failure must not undo the run
        driver.log(f"warning: tracker={tracker.name} could not log the search's summary ({type(exc).__name__}: "
                   f"{exc}); the run directory holds every output")
