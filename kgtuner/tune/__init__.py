"""KGTuner on Ray Tune: the two-stage coordinator, the trial trainable and the experiment outputs.

Modules (the only package that talks to Ray Tune):

* ``settings``   -- ``ExperimentSettings.from_config(cfg)``: the launcher config, validated before Ray starts
* ``budget``     -- ``Budget`` (seconds or trials, stage split, grace) and ``BudgetClock`` (active time only)
* ``coordinator``-- ``Coordinator(settings, run_dir).run()`` / ``run_experiment``: both stages, resume, outputs
* ``stage_searcher`` -- ``StagedSearcher``: stage 1 -> switch (top-k expansion) -> stage 2 in one Tune run
* ``searchers``  -- the space and searchers of an experiment (``kgtuner.search`` factories)
* ``trainable``  -- ``kgtuner_trial`` (Ray Tune function trainable) and ``make_trainable``
* ``resources``  -- per-trial resources and concurrent slots (GPU slots, or CPU slots without GPUs)
* ``results``    -- trials.parquet rows (``ResultsStore``), summary.json, the summary table
* ``plots``      -- search_curve.png; ``best_config`` -- best_config.yaml for ``python -m kgtuner.train``
* ``progress``/``context`` -- Tune callback and the live-experiment registry (survive Tune's pickling)
* ``ray_cluster``/``metrics`` -- starting/attaching Ray with its dashboard; kgtuner's Ray metrics
"""
