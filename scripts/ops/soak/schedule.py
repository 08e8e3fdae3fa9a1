"""The fault schedule (``plan_schedule``, the module docstring of scripts/ops/chaos.py says how it is drawn) and the
soak's constants: the cluster's set-up, the search's overrides, the tolerances of the checks, the driver's lines."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
GPUS_PER_NODE = CPUS_PER_NODE = 4
TMPFS_SIZE = "1g"  # room for the soak's own checkpoints; the full disk is an injected fault
#: Trials long enough to be hit while they train, checkpointed often enough to continue from a checkpoint.
TRIAL_OVERRIDES = ("trial.stage1.max_steps=600", "trial.stage1.valid_every=50", "trial.stage2.max_steps=900",
                   "trial.stage2.valid_every=100", "trial.checkpoint_every_s=5")
BUDGET_TOLERANCE = 0.05
BUDGET_FLOOR_S = 15.0
DRIVER_STOPS = ("sigterm", "kill9", "disk_full")
KINDS = ("trial_kill", "raylet_kill", "sigterm", "kill9", "disk_full")
SWITCH_LINE = "stage switch at t="
CLOSE_LINE = "stage 1 ends at t="
RESUME_MARK = "[kgtuner] resuming the "


@dataclass
class Fault:
    """One planned fault: ``at_s`` in active seconds of the search's budget clock (None: at the stage switch)."""

    kind: str
    at_s: float | None
    extend: bool = False  # its resume carries the budget extension
    restart_after_s: float = 0.0  # raylet_kill: wall seconds until the worker node is started again

    def label(self) -> str:
        when = "at the stage switch" if self.at_s is None else f"t={self.at_s:.0f}s"
        return f"{self.kind} {when}" + (" (+ budget extension on its resume)" if self.extend else "")


@dataclass
class Schedule:
    minutes: float
    seed: int
    budget_s: int  # B0, the budget the search starts with
    final_budget_s: int  # B, after the extension
    faults: list[Fault]

    @property
    def switch_s(self) -> float:
        return self.budget_s / 2.0

    def counts(self) -> dict[str, int]:
        return {k: sum(f.kind == k for f in self.faults) for k in KINDS}


def plan_schedule(minutes: float, seed: int, disk: bool = True, every_kind: bool = False) -> Schedule:
    """The seeded schedule of ``minutes`` (see the module docstring); ``disk=False``: no full-disk fault;
    ``every_kind``: a short schedule (below 10 minutes) also gets one raylet kill and one full disk, in stage 2."""
    rng = random.Random(seed)
    final = max(90, int(round(0.6 * minutes * 60)))
    base = int(round(0.8 * final))
    switch = base / 2.0
    faults = [Fault("kill9", None, extend=True)]
    if minutes < 10:
        faults.append(Fault("trial_kill", round(rng.uniform(0.10, 0.25) * base, 1)))
        faults.append(Fault("sigterm", round(rng.uniform(0.30, 0.40) * base, 1)))
        if every_kind:
            faults.append(Fault("raylet_kill", round(rng.uniform(0.60, 0.68) * final, 1),
                                restart_after_s=round(rng.uniform(5, 10), 1)))
            if disk:
                faults.append(Fault("disk_full", round(rng.uniform(0.75, 0.82) * final, 1)))
        return Schedule(minutes, seed, base, final, sorted(faults, key=_order))
    n_trial = max(20, int(round(0.75 * minutes)))
    n_raylet = max(2, int(minutes // 15))
    n_stop = max(3, int(minutes // 10))
    n_disk = max(1, int(minutes // 30)) if disk else 0
    stops = ["sigterm"] * (n_stop - 1) + ["kill9"] * (n_stop - 1) + ["disk_full"] * n_disk
    rng.shuffle(stops)
    stops.insert(0, "sigterm")  # one in stage 1, whatever the draw
    gap, times = 0.05 * final, []
    for i, _ in enumerate(stops):  # driver stops: apart from each other and from the switch (its own kill9 is there)
        low, high = (0.15 * base, switch - gap) if i == 0 else (0.06 * final, 0.92 * final)
        for _try in range(10000):
            t = rng.uniform(low, high)
            if abs(t - switch) > gap and all(abs(t - u) > gap for u in times):
                times.append(t)
                break
        else:
            raise ValueError(f"cannot place {len(stops)} driver stops {gap:.0f}s apart in {final}s")
    faults += [Fault(kind, round(t, 1)) for kind, t in zip(stops, times)]
    raylet_times: list[float] = []
    for _ in range(n_raylet):
        for _try in range(10000):
            t = rng.uniform(0.08, 0.90) * final
            if all(abs(t - u) > 0.1 * final for u in raylet_times):
                raylet_times.append(t)
                break
    faults += [Fault("raylet_kill", round(t, 1), restart_after_s=round(rng.uniform(5, 20), 1)) for t in raylet_times]
    faults += [Fault("trial_kill", round(rng.uniform(0.03, 0.95) * final, 1)) for _ in range(n_trial)]
    return Schedule(minutes, seed, base, final, sorted(faults, key=_order))


def _order(f: Fault) -> float:
    return -1.0 if f.at_s is None else f.at_s
