"""Per-trial resources and the number of concurrent trial slots on a given cluster, per stage.

``trial.stage1_per_gpu=k`` packs k trials of a packed stage (KGTuner's stage 1: small trials on the
subgraph) onto each GPU with Ray's fractional GPUs: such a trial asks for ``1/k`` of the usual share
(GPUs and CPUs) and k times as many run at once; every other stage keeps the full share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from typing import Any


@dataclass(frozen=True)
class ResourcePlan:
    """``resources`` of each trial (Tune's ``with_resources`` dict), ``slots`` trials at once, notes;
    ``stages``: stage -> (resources, slots) of the packed stages, whose trials differ from that."""

    resources: dict
    slots: int
    notes: list[str] = field(default_factory=list)
    stages: dict[int, tuple[dict, int]] = field(default_factory=dict)

    def resources_of(self, stage: int) -> dict:
        return dict(self.stages[stage][0]) if stage in self.stages else dict(self.resources)

    def slots_of(self, stage: int) -> int:
        return int(self.stages[stage][1]) if stage in self.stages else int(self.slots)

    @property
    def max_slots(self) -> int:
        """The most trials running at once in any stage."""
        return max([self.slots] + [n for _, n in self.stages.values()])

    def trial_resources(self) -> "dict | StageResources":
        """What ``tune.with_resources`` takes: the dict, or a callable of the trial's config when stages differ."""
        if not self.stages:
            return dict(self.resources)
        return StageResources(dict(self.resources), {s: dict(r) for s, (r, _) in self.stages.items()})


@dataclass(frozen=True)
class StageResources:
    """Tune's per-trial resource callable: the trial's ``config["stage"]`` picks its resources
    (``by_stage``; ``default`` for every other stage and for a config without a stage)."""

    default: dict
    by_stage: dict[int, dict]

    def __call__(self, config: dict) -> dict:
        try:
            stage = int((config or {}).get("stage"))
        except (TypeError, ValueError):
            return dict(self.default)
        return dict(self.by_stage.get(stage, self.default))


def plan_resources(trial: Any, *, num_gpus: float, num_cpus: float, packed: tuple[int, ...] = ()) -> ResourcePlan:
    """One trial per ``trial.gpus`` GPU(s) (``trial``: anything with ``gpus`` and ``cpus``, e.g.
    ``kgtuner.tune.settings.TrialSettings``); CPU slots when the cluster has no GPU.

    ``trial.cpus=auto`` gives each trial an equal share of the cluster's CPUs (fractional shares
    are fine for Ray: 8 one-GPU trials on 2 CPUs get 0.25 CPU each, and each sets torch to one
    thread). ``packed``: the strategy's stages whose trials share a GPU ``trial.stage1_per_gpu`` (k)
    at a time: ``1/k`` of the GPUs and CPUs each, k times the slots (GPU clusters only).
    """
    notes: list[str] = []
    k = int(getattr(trial, "stage1_per_gpu", 1) or 1)
    if trial.gpus > 0 and num_gpus >= trial.gpus:
        slots = int(math.floor(num_gpus / trial.gpus + 1e-9))
        cpus = trial.cpus if trial.cpus is not None else math.floor(100 * num_cpus / slots) / 100
        cpus = max(cpus, 0.01)
        if trial.cpus is not None and trial.cpus * slots > num_cpus + 1e-9:
            slots = max(1, int(math.floor(num_cpus / trial.cpus + 1e-9)))
            notes.append(f"trial.cpus={trial.cpus} limits concurrency to {slots} trials (cluster has "
                         f"{num_cpus:g} CPUs)")
        stages = {}
        if k > 1 and packed:
            share = {"gpu": math.floor(1e4 * trial.gpus / k + 1e-6) / 1e4,  # Ray counts 1e-4 GPU units
                      "cpu": max(math.floor(100 * cpus / k) / 100, 0.01)}
            stages = {int(s): (share, slots * k) for s in packed}
            notes.append(f"trial.stage1_per_gpu={k}: stage {', '.join(str(s) for s in packed)} runs {k} trials per "
                         f"GPU share ({slots * k} at once, {share} each); other stages one ({slots} at once)")
        return ResourcePlan({"gpu": trial.gpus, "cpu": cpus}, slots, notes, stages)
    if trial.gpus > 0:
        notes.append(f"no GPUs in the Ray cluster (found {num_gpus:g}): trials run on CPU slots instead "
                     "(cluster.num_gpus=N declares logical GPUs for a local Ray)")
    if k > 1 and packed:
        notes.append(f"trial.stage1_per_gpu={k} has no effect without GPUs: every trial takes one CPU slot")
    cpus = trial.cpus if trial.cpus is not None else 1.0
    slots = max(1, int(math.floor(num_cpus / cpus + 1e-9)))
    return ResourcePlan({"cpu": cpus}, slots, notes)
