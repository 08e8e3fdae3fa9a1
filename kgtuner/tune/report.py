"""``TrialReport``: the one typed shape of what a trial reports to Tune, and of what Tune hands back.

The trainable builds a ``TrialReport`` and reports ``to_dict()`` (Tune needs a flat dict: its CLI
table, ``result.json`` and the scheduler read keys such as ``valid_mrr`` and ``step``); everything that
reads a result back -- the meta-searchers, the early-stopping scheduler, the coordinator recording
trials.parquet rows -- goes through :meth:`TrialReport.from_dict`, so every key is spelled here only.

Keys (flat): ``stage``, ``trial_index`` is not one (it is in the trial config), ``graph``, ``node``,
``node_ip``, ``gpu``, ``step``, ``done``, ``valid_mrr`` (best so far: the searchers' metric) and
``valid_hits@k`` of that best validation, ``last_valid_mrr``, ``train_seed`` (the seed it trains with,
:mod:`kgtuner.tune.seeds`); the final report adds ``trial_status``
(ok|stopped|failed), ``error``, ``test_*``, ``started_unix``, ``ended_unix``, ``total_s``, ``setup_s``,
``fit_s``, ``train_s``. A trial an early-stopping scheduler stopped at a rung is passed to the searchers
with ``early_stopped``/``early_stop_rung`` (``kgtuner.search.base``'s low-fidelity keys, imported where used so
that :mod:`kgtuner.tune.results` and :mod:`kgtuner.analysis` stay free of Ray).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

#: The searchers' metric (best validation MRR so far) and the scheduler's time attribute.
METRIC = "valid_mrr"
MODE = "max"
TIME_ATTR = "step"
#: Metric names of a validation or test evaluation.
METRIC_KEYS = ("mrr", "hits@1", "hits@3", "hits@10")
#: Trial statuses of a final report (and of trials.parquet).
STATUSES = ("ok", "failed", "stopped")
#: Keys the meta-searchers add to a searcher's suggestion (not hyper-parameters).
META_KEYS = ("stage", "trial_index")
#: Per-trial timings of the final report, seconds.
TIMING_KEYS = ("setup_s", "fit_s", "train_s")
STATUS_KEY = "trial_status"


def split_config(config: Mapping[str, Any]) -> tuple[dict, dict]:
    """(hyper-parameters, meta data: ``stage``/``trial_index``) of a trial config."""
    hp = {k: v for k, v in config.items() if k not in META_KEYS}
    meta = {k: config[k] for k in META_KEYS if k in config}
    return hp, meta


def finite(value: Any) -> float | None:
    """``value`` as a finite float, else None (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass
class TrialReport:
    """One report of a trial (a validation, or the final report when ``done``)."""

    stage: int = 1
    step: int = 0
    valid: dict[str, float] = field(default_factory=dict)  # best validation so far
    last_valid_mrr: float | None = None
    graph: str | None = None
    node: str | None = None
    node_ip: str | None = None
    gpu: str | None = None
    done: bool = False
    status: str | None = None  # final report: ok | stopped | failed
    error: str | None = None
    test: dict[str, float] = field(default_factory=dict)
    started_unix: float | None = None
    ended_unix: float | None = None
    total_s: float | None = None
    timing: dict[str, float] = field(default_factory=dict)
    early_stop_rung: int | None = None  # stopped at this rung (steps) by the early-stopping scheduler
    train_seed: int | None = None  # the training seed of the trial (kgtuner.tune.seeds)

    # ------------------------------------------------------------------ values
    @property
    def valid_mrr(self) -> float | None:
        """The best validation MRR so far (finite), or None."""
        return finite(self.valid.get("mrr"))

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def early_stopped(self) -> bool:
        return self.early_stop_rung is not None

    def score(self) -> float | None:
        """The value a searcher ranks this trial by: its best validation MRR, None for a failure
        (failed status or no finite value)."""
        return None if self.failed else self.valid_mrr

    # ------------------------------------------------------------------ dict form
    def to_dict(self) -> dict[str, Any]:
        """The flat dict Tune gets (``tune.report``) and the searchers see."""
        out: dict[str, Any] = {"stage": int(self.stage), "graph": self.graph, "node": self.node,
                               "node_ip": self.node_ip, "gpu": self.gpu, "step": int(self.step),
                               "done": bool(self.done)}
        if self.train_seed is not None:
            out["train_seed"] = int(self.train_seed)
        for key in METRIC_KEYS:
            value = self.valid.get(key)
            out[f"valid_{key}"] = float("nan") if value is None else value
        if self.last_valid_mrr is not None:
            out["last_valid_mrr"] = self.last_valid_mrr
        if self.status is not None:
            out[STATUS_KEY] = self.status
            out["error"] = self.error or ""
        for key, value in self.test.items():
            out[f"test_{key}"] = value
        for key in ("started_unix", "ended_unix", "total_s"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out.update(self.timing)
        if self.early_stop_rung is not None:
            from kgtuner.search.base import EARLY_STOP_RUNG, EARLY_STOPPED  # (results/analysis stay free of Ray)

            out[EARLY_STOPPED] = True
            out[EARLY_STOP_RUNG] = int(self.early_stop_rung)
        return out

    @classmethod
    def from_dict(cls, result: Mapping[str, Any] | None) -> "TrialReport":
        """A report from a result dict (Tune's own keys are ignored; missing keys take their defaults)."""
        from kgtuner.search.base import EARLY_STOP_RUNG, EARLY_STOPPED

        r = dict(result or {})

        def metrics(prefix: str) -> dict[str, float]:
            out = {}
            for key in METRIC_KEYS:
                value = finite(r.get(f"{prefix}_{key}"))
                if value is not None:
                    out[key] = value
            return out

        def num(key: str) -> float | None:
            return finite(r.get(key))

        step = num("step")
        stage = r.get("stage", 1)
        rung = r.get(EARLY_STOP_RUNG) if r.get(EARLY_STOPPED) else None
        seed = num("train_seed")
        return cls(stage=int(stage) if isinstance(stage, (int, float)) and not isinstance(stage, bool) else 1,
                   step=int(step) if step is not None else 0, valid=metrics("valid"),
                   last_valid_mrr=num("last_valid_mrr"), graph=r.get("graph"), node=r.get("node"),
                   node_ip=r.get("node_ip"), gpu=r.get("gpu"), done=bool(r.get("done", False)),
                   status=r.get(STATUS_KEY), error=r.get("error") or None, test=metrics("test"),
                   started_unix=num("started_unix"), ended_unix=num("ended_unix"), total_s=num("total_s"),
                   timing={k: r[k] for k in TIMING_KEYS if num(k) is not None},
                   early_stop_rung=None if rung is None else int(rung),
                   train_seed=None if seed is None else int(seed))

    def replace(self, **changes) -> "TrialReport":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return TrialReport(**values)
