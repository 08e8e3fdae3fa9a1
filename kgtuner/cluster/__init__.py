"""Cluster operations of the search service, independent of any search strategy.

* ``ray_cluster`` -- ``connect_ray(cluster_cfg)``: start a local Ray or attach to a cluster (banner, token auth,
  job runtime env, the job's working_dir copy)
* ``resources``   -- ``plan_resources(trial, num_gpus=, num_cpus=)``: per-trial resources and concurrent slots
* ``metrics``     -- the ``kgtuner_*`` Ray gauges (experiment and trial) and the Grafana dashboard
  (``python -m kgtuner.cluster.metrics``)
"""
