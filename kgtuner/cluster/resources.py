"""Per-trial resources and the number of concurrent trial slots on a given cluster, per stage.

``trial.stage1_per_gpu=k`` packs k trials of each packed stage (KGTuner's stage 1: small trials on the subgraph;
GraSH's rounds on subgraphs; a one-stage search's trials with ``trial.pack_one_stage=true``) onto each GPU with
Ray's fractional GPUs: such a trial asks for ``1/k`` of the usual share (GPUs and CPUs) and k times as many run at
once; every other stage keeps the full share. ``trial.stage1_per_gpu=auto`` picks k per packed stage from the
memory estimate of its largest trial, the GPU's memory and the host's CPUs per GPU (:mod:`kgtuner.cluster.packing`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from typing import Any, Iterable, Mapping

#: ``trial.stage1_per_gpu``'s value that picks k from measurement.
AUTO = "auto"
#: ``plan_resources``'s ``gpu_memory`` default: ask :func:`kgtuner.cluster.packing.detect_gpu_memory`.
DETECT = "detect"


@dataclass(frozen=True)
class ResourcePlan:
    """``resources`` of each trial (Tune's ``with_resources`` dict), ``slots`` trials at once, notes;
    ``stages``: stage -> (resources, slots) of the packed stages, whose trials differ from that;
    ``per_gpu``: stage -> k, the trials sharing one GPU share in each packed stage (1: not packed)."""

    resources: dict
    slots: int
    notes: list[str] = field(default_factory=list)
    stages: dict[int, tuple[dict, int]] = field(default_factory=dict)
    per_gpu: dict[int, int] = field(default_factory=dict)

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


def _stages_text(stages: Iterable[int]) -> str:
    return ", ".join(str(s) for s in sorted(stages))


def _auto_per_gpu(trial: Any, sizes: Mapping[int, Any], *, slot_cpus: float, gpu_memory: Any
                  ) -> dict[int, tuple[int, str]]:
    """Stage -> (k, why) for ``trial.stage1_per_gpu=auto`` (:func:`kgtuner.cluster.packing.choose_per_gpu` of each
    stage's largest trial; ``slot_cpus``: the CPUs of one trial slot, i.e. of ``trial.gpus`` GPUs)."""
    from kgtuner.cluster import packing

    if gpu_memory == DETECT:
        gpu_memory, source = packing.detect_gpu_memory(getattr(trial, "gpu_memory_gb", None))
    else:
        source = "given"
    out = {}
    for stage, size in sizes.items():
        need = size.bytes() if size is not None else None
        choice = packing.choose_per_gpu(trial_bytes=need, gpu_memory=gpu_memory, cpus_per_gpu=slot_cpus / trial.gpus,
                                        gpus_per_trial=float(trial.gpus))
        what = f"; largest trial: {size.describe()}" if size is not None else ""
        out[int(stage)] = (choice.k, f"{choice.reason}{what}" + (f" (GPU memory: {source})"
                                                                  if gpu_memory is not None else ""))
    return out


def plan_resources(trial: Any, *, num_gpus: float, num_cpus: float,
                   packed: Iterable[int] | Mapping[int, Any] = (), gpu_memory: float | None | str = DETECT
                   ) -> ResourcePlan:
    """One trial per ``trial.gpus`` GPU(s) (``trial``: anything with ``gpus`` and ``cpus``, e.g.
    ``kgtuner.tune.settings.TrialSettings``); CPU slots when the cluster has no GPU.

    ``trial.cpus=auto`` gives each trial an equal share of the cluster's CPUs (fractional shares
    are fine for Ray: 8 one-GPU trials on 2 CPUs get 0.25 CPU each, and each sets torch to one
    thread). ``packed``: the strategy's stages whose trials share a GPU ``trial.stage1_per_gpu`` (k)
    at a time: ``1/k`` of the GPUs and CPUs each, k times the slots (GPU clusters only); a mapping gives each
    stage's largest trial (``kgtuner.cluster.packing.TrialSize``, None: unknown), from which
    ``trial.stage1_per_gpu=auto`` picks k per stage against ``gpu_memory`` (bytes of one GPU; ``"detect"``:
    ``trial.gpu_memory_gb``, the driver's CUDA devices or Ray's accelerator type; None: unknown, k = 1).
    """
    notes: list[str] = []
    sizes = dict(packed) if isinstance(packed, Mapping) else {int(s): None for s in packed}
    setting = getattr(trial, "stage1_per_gpu", 1)
    auto = setting == AUTO
    if trial.gpus > 0 and num_gpus >= trial.gpus:
        slots = int(math.floor(num_gpus / trial.gpus + 1e-9))
        cpus = trial.cpus if trial.cpus is not None else math.floor(100 * num_cpus / slots) / 100
        cpus = max(cpus, 0.01)
        if trial.cpus is not None and trial.cpus * slots > num_cpus + 1e-9:
            slots = max(1, int(math.floor(num_cpus / trial.cpus + 1e-9)))
            notes.append(f"trial.cpus={trial.cpus} limits concurrency to {slots} trials (cluster has "
                         f"{num_cpus:g} CPUs)")
        if auto and sizes:
            chosen = _auto_per_gpu(trial, sizes, slot_cpus=cpus, gpu_memory=gpu_memory)  # cluster CPUs / GPUs
        else:
            k = 1 if auto else int(setting or 1)
            chosen = {int(s): (k, "") for s in sizes}
        stages, per_gpu = {}, {}
        for k in sorted({k for k, _ in chosen.values()}, reverse=True):
            group = [s for s, (ks, _) in chosen.items() if ks == k]
            per_gpu.update({s: k for s in group})
            why = "; ".join(sorted({w for s, (_, w) in chosen.items() if s in group and w}))
            if k == 1:
                if auto:
                    notes.append(f"trial.stage1_per_gpu=auto: stage {_stages_text(group)} keeps one trial per GPU "
                                 f"share ({why})")
                continue
            share = {"gpu": math.floor(1e4 * trial.gpus / k + 1e-6) / 1e4,  # Ray counts 1e-4 GPU units
                     "cpu": max(math.floor(100 * cpus / k) / 100, 0.01)}
            stages.update({s: (dict(share), slots * k) for s in group})
            notes.append(f"trial.stage1_per_gpu={setting}: stage {_stages_text(group)} runs {k} trials per GPU share "
                         f"({slots * k} at once, {share} each); other stages one ({slots} at once)"
                         + (f"; k={k}, {why}" if why else ""))
        return ResourcePlan({"gpu": trial.gpus, "cpu": cpus}, slots, notes, stages, per_gpu)
    if trial.gpus > 0:
        notes.append(f"no GPUs in the Ray cluster (found {num_gpus:g}): trials run on CPU slots instead "
                     "(cluster.num_gpus=N declares logical GPUs for a local Ray)")
    if sizes and auto:
        notes.append("trial.stage1_per_gpu=auto: one trial per CPU slot (no GPUs to pack trials onto)")
    elif sizes and int(setting or 1) > 1:
        notes.append(f"trial.stage1_per_gpu={setting} has no effect without GPUs: every trial takes one CPU slot")
    cpus = trial.cpus if trial.cpus is not None else 1.0
    slots = max(1, int(math.floor(num_cpus / cpus + 1e-9)))
    return ResourcePlan({"cpu": cpus}, slots, notes, {}, {int(s): 1 for s in sizes})
