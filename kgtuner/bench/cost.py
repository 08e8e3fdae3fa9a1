"""A run's cost that does not move with the machine's load: steps and validations priced per shape.

Issue 38 found runs of one shape recorded at up to 2x each other's speed (the machine's other work, its caches),
and the replays then rank what happened to run fast. A recording with ``cost="calibrated"`` prices every run
instead: before its first run it measures, once per *shape* (graph, batch size, dimension, negatives) and in a
process of its own thread, the CPU seconds of one training step and of one validation (:func:`calibrate_shape`,
written to the journal as ``calibration`` records, so a restart and the replays read the same prices). A run of
that shape then costs ``steps x step_s + validations x valid_s`` (:class:`ShapeCost`), its cap is a cap on that
cost, and so the step at which the cap stops it is fixed before it starts (:meth:`ShapeCost.max_steps`): the same
run stops at the same step on any machine, and the replays' clock moves by these costs, not by measured seconds.
The loss, regularizer, optimizer and initializer are left out of the shape (the step's matrix products are the
batch's scores: batch x (1 + negatives) x dim); the card shows how far measured seconds stray from the priced ones.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Mapping

#: The configuration a shape is timed with (the other hyper-parameters are the shape's): Adam, DURA, dropout,
#: the binary loss -- the dearer option of each where options differ in cost at all.
REFERENCE_CONFIG = {"loss": "BCE_mean", "regularizer": "DURA", "reg_weight": 1e-4, "dropout": 0.1,
                    "optimizer": "Adam", "lr": 1e-3, "initializer": "xavier_uniform", "inverse": False}
#: Steps timed per repeat (after ``WARMUP_STEPS``), repeats per shape; the price is the median repeat.
TIMED_STEPS = 40
WARMUP_STEPS = 5
REPEATS = 3
VALID_REPEATS = 2


@dataclass(frozen=True)
class Shape:
    """What a step's and a validation's cost depends on: the pool's graph role (``sub``/``full``), the batch
    size, the dimension and the negatives (a count, or ``1VsAll``/``kVsAll``)."""

    graph: str
    batch_size: int
    dim: int
    negatives: str

    @classmethod
    def of(cls, graph: str, config: Mapping[str, Any]) -> "Shape":
        return cls(str(graph), int(config["batch_size"]), int(config["dim"]), str(config["negatives"]))

    @property
    def key(self) -> str:
        return f"{self.graph}-b{self.batch_size}-d{self.dim}-n{self.negatives}"


@dataclass(frozen=True)
class ShapeCost:
    """The price of a step and of a validation of one shape, in CPU seconds of one thread."""

    step_s: float
    valid_s: float

    def cost(self, steps: int, validations: int) -> float:
        return steps * self.step_s + validations * self.valid_s

    def validations_at(self, steps: int, valid_every: int) -> int:
        """Validations a run that ends at ``steps`` has done: one every ``valid_every`` steps, and a final one
        off that grid (the run validates its last state once)."""
        if steps <= 0:
            return 0
        return steps // valid_every + (1 if steps % valid_every else 0)

    def max_steps(self, cap: float, valid_every: int) -> int:
        """The most steps a run may train so that its cost, validations included, stays within ``cap``."""
        if cap <= 0 or self.step_s <= 0:
            raise ValueError(f"cap {cap} and step price {self.step_s} must be positive")
        per_block = valid_every * self.step_s + self.valid_s
        blocks = int(cap // per_block)
        steps = blocks * valid_every
        left = cap - blocks * per_block - self.valid_s  # a last part-block pays its final validation
        if left > 0:
            steps += min(valid_every - 1, int(left // self.step_s))
        eps = 1e-9 * max(1.0, cap)  # the division's rounding: settle the last step by the cost itself

        def fits(n: int) -> bool:
            return self.cost(n, self.validations_at(n, valid_every)) <= cap + eps

        while fits(steps + 1):
            steps += 1
        while steps > 1 and not fits(steps):
            steps -= 1
        return max(1, steps)


def calibrate_shape(kg, shape: Shape, *, model: str, max_valid_triples: int | None, filter_index=None,
                    seed: int = 0) -> dict[str, Any]:
    """Time one shape on ``kg`` (CPU seconds of this process): ``TIMED_STEPS`` training steps, ``REPEATS``
    times, and ``VALID_REPEATS`` validations of the recording's validation sample; the medians are the prices.
    Returns a ``calibration`` journal record."""
    import numpy as np
    import torch

    from kgtuner.kge import TrainConfig, Trainer

    negatives = shape.negatives if not shape.negatives.isdigit() else int(shape.negatives)
    cfg = TrainConfig.from_dict({**REFERENCE_CONFIG, "batch_size": shape.batch_size, "dim": shape.dim,
                                 "negatives": negatives, "model": model, "seed": seed, "device": "cpu",
                                 "max_epochs": 1, "valid_every": 10**9, "patience": 5,
                                 "max_valid_triples": max_valid_triples})
    trainer = Trainer(cfg, kg, filter_index=filter_index)
    batches = trainer._epoch_batches()
    n = trainer.steps_per_epoch

    def steps(k: int, start: int) -> None:
        for i in range(start, start + k):
            lo = (i % n) * shape.batch_size
            trainer._train_step(batches[lo:lo + shape.batch_size])

    steps(WARMUP_STEPS, 0)
    step_times = []
    for r in range(REPEATS):
        t = time.process_time()
        steps(TIMED_STEPS, WARMUP_STEPS + r * TIMED_STEPS)
        step_times.append((time.process_time() - t) / TIMED_STEPS)
    valid_times = []
    for _ in range(VALID_REPEATS):
        t = time.process_time()
        trainer.evaluate("valid")
        valid_times.append(time.process_time() - t)
    return {"kind": "calibration", "shape": shape.key, "graph": shape.graph, "batch_size": shape.batch_size,
            "dim": shape.dim, "negatives": shape.negatives, "step_s": float(np.median(step_times)),
            "valid_s": float(np.median(valid_times)), "step_repeats": step_times, "valid_repeats": valid_times,
            "threads": torch.get_num_threads(), "timed_steps": TIMED_STEPS}


def prices(records) -> dict[str, ShapeCost]:
    """``{shape key: ShapeCost}`` from a journal's ``calibration`` records (the first record of a shape wins)."""
    out: dict[str, ShapeCost] = {}
    for r in records:
        if r.get("kind") == "calibration" and r["shape"] not in out:
            out[r["shape"]] = ShapeCost(float(r["step_s"]), float(r["valid_s"]))
    return out


def curve_costs(curve, price: ShapeCost) -> list[float]:
    """The cumulative cost at each point of a run's learning curve (its step and the validations so far)."""
    return [price.cost(int(p["step"]), i + 1) for i, p in enumerate(curve)]


def spread(ratios) -> dict[str, float]:
    """Median and 5/95 % quantiles of measured/priced ratios (the card's check of the price model)."""
    import numpy as np

    r = np.asarray([x for x in ratios if x is not None and math.isfinite(x)], dtype=float)
    if not len(r):
        return {}
    return {"median": float(np.median(r)), "p05": float(np.quantile(r, 0.05)), "p95": float(np.quantile(r, 0.95)),
            "n": int(len(r))}


def needed_shapes(pools_, pools) -> list[Shape]:
    """The shapes the runs of ``pools`` (a :class:`~kgtuner.bench.pool.Pools`' pool names) train at, sorted: the
    drawn pools' own, and the expansions' (every negatives value of the stage-1 pool at every stage-2 size)."""
    from kgtuner.bench.pool import POOL_GRAPH

    shapes = set()
    for pool in pools:
        if pool == "expand":
            negatives = {c["negatives"] for c in pools_.stage1_configs()}
            shapes |= {Shape("full", b, d, str(n)) for n in negatives for b, d in pools_.expand_sizes()}
        else:
            shapes |= {Shape.of(POOL_GRAPH[pool], c) for c in pools_.drawn(pool)}
    return sorted(shapes, key=lambda s: (s.graph, s.batch_size, s.dim, s.negatives))


def calibrate_missing(shapes, graphs, settings, have: Mapping[str, ShapeCost], append, log=print) -> dict:
    """Time every shape of ``shapes`` that ``have`` lacks, on its graph (``graphs.for_pool``), ``append`` its
    ``calibration`` record (the journal's), and return ``have`` with the new prices."""
    from kgtuner.bench.journal import load_average
    from kgtuner.bench.pool import POOL_GRAPH

    out = dict(have)
    todo = [s for s in shapes if s.key not in out]
    pool_of = {role: next(p for p, g in POOL_GRAPH.items() if g == role) for role in set(POOL_GRAPH.values())}
    for n, shape in enumerate(todo, 1):
        pool = pool_of[shape.graph]
        kg, fi = graphs.for_pool(pool)
        rec = calibrate_shape(kg, shape, model=settings.model, max_valid_triples=settings.max_valid_triples(pool),
                              filter_index=fi, seed=settings.seed)
        rec["load"] = load_average()
        append(rec)
        out[shape.key] = ShapeCost(rec["step_s"], rec["valid_s"])
        log(f"calibration {n}/{len(todo)} {shape.key}: step {rec['step_s'] * 1e3:.2f} ms, "
            f"validation {rec['valid_s']:.2f} s (CPU seconds)")
    return out

