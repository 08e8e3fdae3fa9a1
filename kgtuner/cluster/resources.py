"""Per-trial resources and the number of concurrent trial slots on a given cluster."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from typing import Any


@dataclass(frozen=True)
class ResourcePlan:
    """``resources`` of each trial (Tune's ``with_resources`` dict), ``slots`` trials at once, notes."""

    resources: dict
    slots: int
    notes: list[str] = field(default_factory=list)


def plan_resources(trial: Any, *, num_gpus: float, num_cpus: float) -> ResourcePlan:
    """One trial per ``trial.gpus`` GPU(s) (``trial``: anything with ``gpus`` and ``cpus``, e.g.
    ``kgtuner.tune.settings.TrialSettings``); CPU slots when the cluster has no GPU.

    ``trial.cpus=auto`` gives each trial an equal share of the cluster's CPUs (fractional shares
    are fine for Ray: 8 one-GPU trials on 2 CPUs get 0.25 CPU each, and each sets torch to one
    thread).
    """
    notes: list[str] = []
    if trial.gpus > 0 and num_gpus >= trial.gpus:
        slots = int(math.floor(num_gpus / trial.gpus + 1e-9))
        cpus = trial.cpus if trial.cpus is not None else math.floor(100 * num_cpus / slots) / 100
        cpus = max(cpus, 0.01)
        if trial.cpus is not None and trial.cpus * slots > num_cpus + 1e-9:
            slots = max(1, int(math.floor(num_cpus / trial.cpus + 1e-9)))
            notes.append(f"trial.cpus={trial.cpus} limits concurrency to {slots} trials (cluster has "
                         f"{num_cpus:g} CPUs)")
        return ResourcePlan({"gpu": trial.gpus, "cpu": cpus}, slots, notes)
    if trial.gpus > 0:
        notes.append(f"no GPUs in the Ray cluster (found {num_gpus:g}): trials run on CPU slots instead "
                     "(cluster.num_gpus=N declares logical GPUs for a local Ray)")
    cpus = trial.cpus if trial.cpus is not None else 1.0
    slots = max(1, int(math.floor(num_cpus / cpus + 1e-9)))
    return ResourcePlan({"cpu": cpus}, slots, notes)
