"""Cluster operations of the search service, independent of any search strategy.

* ``ray_cluster`` -- ``connect_ray(cluster_cfg)``: start a local Ray or attach to a cluster (banner, token auth,
  job runtime env, the job's working_dir copy)
* ``local_processes`` -- a local start's processes: SIGTERM left to the driver, a reaper, ``shutdown_ray``
* ``resources``   -- ``plan_resources(trial, num_gpus=, num_cpus=)``: per-trial resources and concurrent slots
* ``packing``     -- how many small trials share a GPU (``trial.stage1_per_gpu=auto``: the trial's memory estimate,
  the CPUs per GPU) and each packed trial's memory cap
* ``metrics``     -- the ``kgtuner_*`` Ray gauges (experiment and trial) and the Grafana dashboard
  (``python -m kgtuner.cluster.metrics``)
"""
