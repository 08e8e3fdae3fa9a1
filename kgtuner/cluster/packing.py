"""How many trials of a packed stage share one GPU (``trial.stage1_per_gpu=auto``), and each packed trial's share of
its GPU's memory.

The estimate is a handful of pure functions with explicit parameters (unit-tested on any machine):

* :func:`parameter_floats`: the floats of one trial's model: entity rows ``E x dim`` (``dim`` counts real numbers
  per row in kgtuner's models: ComplEx's dim/2 complex numbers are dim floats, see ``kgtuner.kge.models``), relation
  rows ``2R x w`` (reciprocal relations counted, whether or not the trial draws them; ``w = dim``, RESCAL ``dim^2``,
  RotatE ``dim/2``), plus TuckER's ``dim^3`` core and ConvE's projection (``2 x channels x dim^2``);
* :func:`trial_bytes`: ``4 B x floats x 4`` (the parameters, Adam's two moments and the best-validation clone; a
  sampled-negatives trial's gradient is row-sparse) -- ``x 5`` with 1VsAll/kVsAll, whose gradient is dense --, plus the batch's activations,
  ``4 B x ACTIVATION_FACTOR x batch x (negatives + 2) x dim`` with sampled negatives (the gathered rows, their dropout
  copies and gradients) or ``4 B x (ACTIVATION_FACTOR x batch x E + 2 x E x dim)`` with 1VsAll/kVsAll (the score
  matrix of one GEMM and its gradient; the dropped-out entity table and its gradient), plus the CUDA context of the
  trial's own process (``CUDA_CONTEXT_BYTES``, 500 MB);
* :func:`choose_per_gpu`: ``k = min(memory bound, core bound, MAX_PER_GPU)``, the memory bound being
  ``floor(HEADROOM x GPU memory / trial bytes)`` trials per GPU (at most 80% of the memory is planned), the core
  bound the CPUs per GPU (each packed trial needs a core of its own to launch its kernels), the cap 8. Without a
  known GPU memory (a CPU-only cluster, logical GPUs) or without an estimate of the trial, k is 1.

Two thin probes touch the machine: :func:`detect_gpu_memory` (``trial.gpu_memory_gb``, else ``nvidia-smi``, else the
smallest CUDA device the driver sees, else the Ray cluster's ``accelerator_type``) and :func:`limit_gpu_memory` (called at a trial's
start: a trial holding a fraction g < 1 of a GPU may allocate at most ``MEMORY_MARGIN x g`` of its memory, less its
CUDA context, so an
over-large packed trial fails with a CUDA out-of-memory error in its own process, recorded as that trial's failure,
and the trials sharing its GPU go on).
"""

from __future__ import annotations

import gc
import math
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Mapping

GB = 1e9
BYTES_PER_FLOAT = 4
#: Copies of every parameter a trial holds: the parameter, Adam's two moments (sampled negatives: row-sparse
#: gradients) and the best-validation clone the trainer keeps; 1VsAll/kVsAll add a dense gradient (one copy more).
#: (A checkpoint's state_dict copies them once more for a moment; the headroom covers it.)
OPTIMIZER_COPIES = 4
#: Activation tensors kept per gathered row or score (forward value, dropout copy, gradient, one temporary).
ACTIVATION_FACTOR = 4
#: A CUDA context per trial process (the runtime, cuBLAS workspaces, the caching allocator's slack).
CUDA_CONTEXT_BYTES = 500e6
#: Share of a GPU's memory that packing plans for (the rest is headroom for fragmentation and evaluation).
HEADROOM = 0.8
#: Most trials packed on one GPU, whatever the memory and cores allow.
MAX_PER_GPU = 8
#: A packed trial's allocator cap, as a share of its GPU share (``set_per_process_memory_fraction``).
MEMORY_MARGIN = 0.95
#: Negatives that score every entity: ``kgtuner.kge.config.DENSE_NEGATIVES``, repeated here so that the settings
#: (which import this module) do not import torch.
DENSE_NEGATIVES = ("1VsAll", "kVsAll")
#: Memory of Ray's ``accelerator_type`` values (GB, 1e9 bytes; the smaller model where a name covers two), for a
#: driver that sees no CUDA device (a remote cluster).
ACCELERATOR_MEMORY_GB = {"V100": 16, "P100": 12, "T4": 16, "P4": 8, "K80": 12, "A10G": 24, "L4": 24, "L40S": 48,
                         "A100": 40, "A100-40G": 40, "A100-80G": 80, "H100": 80, "H200": 141}


def parameter_floats(model: str, entities: int, relations: int, dim: int, model_options: Mapping | None = None) -> int:
    """Floats of one model: ``E x dim`` entity rows, ``2R x w`` relation rows (``w``: ``dim``, RESCAL ``dim^2``,
    RotatE ``dim/2``), TuckER's ``dim^3`` core, ConvE's ``2 x channels x dim^2`` projection."""
    name = str(model).lower()
    width = {"rescal": dim * dim, "rotate": dim // 2}.get(name, dim)
    floats = int(entities) * dim + 2 * int(relations) * width
    if name == "tucker":
        floats += dim ** 3
    elif name == "conve":
        floats += 2 * int((model_options or {}).get("channels", 32)) * dim * dim
    return floats


def trial_bytes(*, model: str, entities: int, relations: int, dim: int, batch_size: int, negatives: int | None,
                model_options: Mapping | None = None, context_bytes: float = CUDA_CONTEXT_BYTES) -> float:
    """GPU memory of one trial (bytes): ``4 B x floats x OPTIMIZER_COPIES`` (one copy more with a dense gradient:
    ``negatives`` None, i.e. 1VsAll/kVsAll) + activations (``4 B x ACTIVATION_FACTOR x batch x (negatives + 2) x dim``; with every entity as a
    negative ``4 B x (ACTIVATION_FACTOR x batch x E + 2 x E x dim)``: the scores, the dropped-out entity table and
    their gradients) + ``context_bytes`` (the process's CUDA context)."""
    floats = parameter_floats(model, entities, relations, dim, model_options)
    dense = negatives is None
    state = BYTES_PER_FLOAT * floats * (OPTIMIZER_COPIES + (1 if dense else 0))
    if dense:
        activations = BYTES_PER_FLOAT * (ACTIVATION_FACTOR * int(batch_size) * int(entities) + 2 * int(entities) * dim)
    else:
        activations = BYTES_PER_FLOAT * ACTIVATION_FACTOR * int(batch_size) * (int(negatives) + 2) * dim
    return float(state + activations + context_bytes)


@dataclass(frozen=True)
class TrialSize:
    """The largest trial a stage can draw: its graph's sizes and the space's largest ``dim``, ``batch_size`` and
    ``negatives`` (None: 1VsAll/kVsAll, every entity)."""

    entities: int
    relations: int
    dim: int
    batch_size: int
    negatives: int | None
    model: str = "complex"
    model_options: Mapping | None = None

    def bytes(self) -> float:
        return trial_bytes(model=self.model, entities=self.entities, relations=self.relations, dim=self.dim,
                           batch_size=self.batch_size, negatives=self.negatives, model_options=self.model_options)

    def describe(self) -> str:
        neg = "all-entity negatives" if self.negatives is None else f"{self.negatives} negatives"
        return (f"{self.model} on {self.entities} entities, dim {self.dim}, batch {self.batch_size}, {neg}: "
                f"~{self.bytes() / GB:.2f} GB")


def _largest(space, name: str, default: Any) -> list:
    """Every value the space's ``name`` can take (a range: its upper end); ``[default]`` when absent."""
    if name not in getattr(space, "names", []):
        return [default]
    param = space[name]
    values = getattr(param, "values", None)
    return list(values) if values is not None else [param.high]


def stage_size(space, graph, *, model: str, model_options: Mapping | None = None) -> TrialSize:
    """The :class:`TrialSize` of a stage whose trials draw from ``space`` (a ``kgtuner.search.SearchSpace``) and
    train on ``graph`` (anything with ``num_entities`` and ``num_relations``)."""
    negatives = _largest(space, "negatives", 2048)
    sampled = [int(v) for v in negatives if str(v) not in DENSE_NEGATIVES]
    return TrialSize(entities=int(graph.num_entities), relations=int(graph.num_relations),
                     dim=int(max(int(v) for v in _largest(space, "dim", 100))),
                     batch_size=int(max(int(v) for v in _largest(space, "batch_size", 128))),
                     negatives=None if len(sampled) < len(negatives) else max(sampled), model=str(model),
                     model_options=dict(model_options or {}))


@dataclass(frozen=True)
class PackingChoice:
    """``k`` trials per GPU share, ``bound`` (``memory``, ``cores``, ``cap``, ``unknown``) and the reason, in words."""

    k: int
    bound: str
    reason: str


def ray_share(share: float) -> bool:
    """Ray places this GPU share without waste: a whole number of GPUs, or 1/m of one (m trials fill a GPU)."""
    if share >= 1:
        return abs(share - round(share)) < 1e-9
    return abs(1 / share - round(1 / share)) < 1e-6


def choose_per_gpu(*, trial_bytes: float | None, gpu_memory: float | None, cpus_per_gpu: float,
                   gpus_per_trial: float = 1.0, cap: int = MAX_PER_GPU, headroom: float = HEADROOM) -> PackingChoice:
    """k for ``trial.stage1_per_gpu=auto``: ``min(floor(headroom x gpu_memory / trial_bytes), floor(cpus_per_gpu),
    cap)`` trials per GPU, times ``gpus_per_trial`` (k trials share one trial's ``trial.gpus``), at least 1; lowered
    until ``gpus_per_trial / k`` is a whole number of GPUs or 1/m of one (so that m packed trials fill a GPU: with
    ``trial.gpus=2`` and k=3, 0.67 GPU each, Ray would fit one a GPU). 1 when ``gpu_memory`` or
    ``trial_bytes`` is None (unknown)."""
    if gpu_memory is None or gpu_memory <= 0:
        return PackingChoice(1, "unknown", "the GPUs' memory is unknown (no CUDA device visible to the driver, no "
                                           "accelerator type in the Ray cluster): set trial.gpu_memory_gb or an "
                                           "integer trial.stage1_per_gpu")
    if trial_bytes is None or trial_bytes <= 0:
        return PackingChoice(1, "unknown", "no memory estimate of the stage's trials")
    g = max(float(gpus_per_trial), 1e-9)
    by_memory = int(math.floor(headroom * gpu_memory / trial_bytes * g + 1e-9))
    by_cores = int(math.floor(max(float(cpus_per_gpu), 0.0) * g + 1e-9))
    bounds = {"memory": by_memory, "cores": by_cores, "cap": int(cap)}
    k = max(1, min(bounds.values()))
    while k > 1 and not ray_share(g / k):
        k -= 1
    bound = "+".join(name for name, n in bounds.items() if n == min(bounds.values()))
    reason = (f"{bound}-bound: a trial needs ~{trial_bytes / GB:.2f} GB and {headroom:.0%} of the GPU's "
              f"{gpu_memory / GB:.0f} GB holds {max(by_memory, 0)}; {cpus_per_gpu * g:g} CPUs per GPU share; cap {cap}")
    return PackingChoice(k, bound, reason)


def detect_gpu_memory(explicit_gb: float | None = None) -> tuple[float | None, str]:
    """(bytes of one GPU's memory, where it came from), or (None, why not): ``explicit_gb`` (``trial.gpu_memory_gb``),
    else the smallest GPU ``nvidia-smi`` lists on this host (no CUDA context in the driver), else the smallest CUDA
    device visible to this process (``torch.cuda.get_device_properties``), else the Ray cluster's
    ``accelerator_type`` (:data:`ACCELERATOR_MEMORY_GB`; Ray must be connected)."""
    if explicit_gb is not None:
        return float(explicit_gb) * GB, f"trial.gpu_memory_gb={explicit_gb:g}"
    smi = nvidia_smi_memory()
    if smi is not None:
        return smi
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
            small = min(props, key=lambda p: p.total_memory)
            return float(small.total_memory), f"CUDA device {small.name}"
    except Exception:  # noqa: BLE001 - a broken CUDA setup: fall through to Ray's view
        pass
    try:
        import ray

        if ray.is_initialized():
            types = [k.split(":", 1)[1] for k in ray.cluster_resources() if k.startswith("accelerator_type:")]
            known = [ACCELERATOR_MEMORY_GB[t] for t in types if t in ACCELERATOR_MEMORY_GB]
            if known:
                return min(known) * GB, f"Ray accelerator_type {', '.join(sorted(types))}"
    except Exception:  # noqa: BLE001
        pass
    return None, "unknown"


def nvidia_smi_memory(run=subprocess.run) -> tuple[float, str] | None:
    """(bytes of the smallest GPU ``nvidia-smi`` lists, its name), or None (no nvidia-smi, no GPU, an error)."""
    if shutil.which("nvidia-smi") is None and run is subprocess.run:
        return None
    try:
        out = run(["nvidia-smi", "--query-gpu=memory.total,mig.mode.current,name", "--format=csv,noheader,nounits"],
                  capture_output=True, text=True, timeout=20, check=True).stdout
        rows = [[part.strip() for part in line.split(",", 2)] for line in out.strip().splitlines() if line.strip()]
        if any(mig == "Enabled" for _, mig, _ in rows):
            return None  # MIG: the listing is the whole GPU's, not the instance's (torch's device properties are)
        gpus = [(float(mib) * 2 ** 20, name) for mib, _, name in rows]
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if not gpus:
        return None
    size, name = min(gpus)
    return size, f"nvidia-smi: {name}"


def memory_fraction(resources: Mapping[str, Any] | None, margin: float = MEMORY_MARGIN,
                    gpu_memory: float | None = None) -> float | None:
    """The share of its GPU's memory a trial may allocate: ``margin x g`` for a GPU share ``0 < g < 1`` (a packed
    trial; ``resources``: Ray's assigned resources, ``GPU``, or a plan's ``gpu``), less the CUDA context each process
    holds outside the allocator (:data:`CUDA_CONTEXT_BYTES` of ``gpu_memory`` bytes, when given), at least 0.05 of
    it; None for a whole GPU or none."""
    resources = resources or {}
    g = float(resources.get("GPU", resources.get("gpu", 0.0)) or 0.0)
    if not 0.0 < g < 1.0:
        return None
    context = CUDA_CONTEXT_BYTES / gpu_memory if gpu_memory else 0.0
    return round(max(0.05 * g, margin * g - context), 6)


def limit_gpu_memory(resources: Mapping[str, Any] | None = None) -> float | None:
    """At a trial's start: cap this process's CUDA allocations on each visible device at :func:`memory_fraction` of
    the trial's resources (default: Ray's assigned ones), so that an over-large packed trial gets
    ``torch.cuda.OutOfMemoryError`` in its own process. A whole-GPU trial lifts a cap an earlier packed trial left
    in a reused worker. Returns the fraction set; a no-op (None) without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    if resources is None:
        try:
            import ray

            resources = ray.get_runtime_context().get_assigned_resources()
        except Exception:  # noqa: BLE001 - outside Ray: no share to keep to
            resources = {}
    if memory_fraction(resources) is None and not torch.cuda.is_initialized():
        return None  # nothing to lift, and no CUDA context to create for it
    if torch.cuda.is_initialized():  # a reused worker: an earlier trial's tensors (reference cycles) go first
        gc.collect()
        torch.cuda.empty_cache()
    fraction = None
    for device in range(torch.cuda.device_count()):
        total = torch.cuda.get_device_properties(device).total_memory
        fraction = memory_fraction(resources, gpu_memory=total)
        torch.cuda.set_per_process_memory_fraction(1.0 if fraction is None else fraction, device)
    return fraction
