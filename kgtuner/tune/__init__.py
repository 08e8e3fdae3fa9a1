"""KGTuner on Ray Tune: a strategy-agnostic driver, the search strategies, the trial trainable and the outputs.

The only package that talks to Ray Tune. Modules by concern:

* running an experiment: ``settings`` (``ExperimentSettings.from_config(cfg)``, validated before Ray
  starts), ``coordinator`` (``Coordinator(settings, run_dir).run()`` / ``run_experiment``: the steps of a run,
  persistence, the budget clock, Tune events -> trials.parquet rows, outputs; no strategy-specific code),
  ``faults`` (its fault paths: SIGTERM, a full disk, a dead Ray, Tune's log filter; ``ExperimentInterrupted``),
  ``resume`` (its resume paths: reconcile with Tune's saved state, adopted rows, the restored searcher, a
  larger budget), ``budget``
  (``Budget``, ``BudgetClock``), ``deadlines`` (stage deadlines through Ray's KV store), ``events``
  (the typed events and the ``Driver`` protocol the searchers and the scheduler reach the live
  coordinator through), ``progress`` (the Tune callback feeding the coordinator), ``run_dir``
  (kgtuner_state.json, the ``resume`` checks), ``tune_state`` (Tune's saved experiment, read and repaired on resume); the full graph comes from ``kgtuner.data.from_config``;
* search strategies: ``strategies`` (one module per strategy, found by ``search.name``:
  ``strategy_class(name)``; ``strategies.base.Strategy`` is the contract, ``strategies.meta.MetaSearcher``
  the searchers' shared plumbing), ``early_stop`` (ASHA rungs per stage through the public scheduler API);
* trial execution: ``trainable`` (``kgtuner_trial``, ``make_trainable``), ``report`` (``TrialReport``: the
  one typed shape of a trial's report);
* outputs: ``outputs`` (summary.json's content, every file written at the end), ``results`` (trials.parquet,
  the summary table), ``plots`` (search_curve.png),
  ``best_config`` (best_config.yaml), ``answer_model`` (the answer's trained model).

Cluster operations (``ray_cluster``, ``resources``, ``metrics``) are the package :mod:`kgtuner.cluster`.
"""
