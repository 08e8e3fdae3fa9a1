"""kgtuner's custom Ray metrics (``ray.util.metrics`` gauges), for the dashboard and Prometheus.

Every name starts with ``kgtuner_``; Ray's Prometheus export adds ``ray_`` in front, so the
exported series are ``ray_kgtuner_*`` (see ``exported_name``). Gauges are created lazily on first
use and only when Ray is initialised in this process: without Ray every method is a cheap no-op,
so the engine and unit tests can call them unconditionally.

Driver side: ``ExperimentMetrics``; trial side (inside a Tune trainable): ``TrialMetrics``.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

PREFIX = "kgtuner_"
RAY_EXPORT_PREFIX = "ray_"


@dataclass(frozen=True)
class MetricSpec:
    """One gauge: its name (without Ray's ``ray_``), description and tag keys."""

    name: str
    description: str
    tag_keys: tuple[str, ...]


#: All kgtuner gauges, keyed by a short id used in the code.
METRICS: dict[str, MetricSpec] = {
    "stage": MetricSpec("kgtuner_stage", "Current KGTuner stage (1: subgraph, 2: full graph; 0 before start)",
                        ("experiment",)),
    "best_valid_mrr": MetricSpec("kgtuner_best_valid_mrr",
                                 "Best validation MRR so far; stage='all' overall, '1'/'2' per stage",
                                 ("experiment", "stage")),
    "trials": MetricSpec("kgtuner_trials", "Number of trials by state (running, finished, failed)",
                         ("experiment", "state")),
    "budget_used": MetricSpec("kgtuner_budget_used_fraction", "Fraction of the experiment's budget used (0..1)",
                              ("experiment",)),
    "trial_valid_mrr": MetricSpec("kgtuner_trial_valid_mrr", "Latest validation MRR of a trial",
                                  ("experiment", "trial_id", "stage")),
    "trial_throughput": MetricSpec("kgtuner_trial_throughput_triples_per_second",
                                   "Training throughput of a trial (positive triples per second)",
                                   ("experiment", "trial_id", "stage")),
}


def exported_name(key: str) -> str:
    """The Prometheus series name Ray exports for ``METRICS[key]`` (``ray_kgtuner_...``)."""
    return RAY_EXPORT_PREFIX + METRICS[key].name


_GAUGES: dict[str, Any] = {}
_SESSION: list[str | None] = [None]  # the Ray cluster the cached gauges belong to
_LOCK = threading.Lock()


def _ray_session() -> str | None:
    """The GCS address of the Ray this process is connected to, or None when Ray is not initialised."""
    import ray

    if not ray.is_initialized():
        return None
    return ray.get_runtime_context().gcs_address


def get_gauge(key: str):
    """The process-wide gauge for ``key``, created on first use; None when Ray is not initialised.

    Gauges are re-created when the process connects to another Ray (after ``ray.shutdown``/``init``).
    """
    session = _ray_session()
    if session is None:
        return None
    from ray.util.metrics import Gauge

    with _LOCK:
        if _SESSION[0] != session:
            _GAUGES.clear()
            _SESSION[0] = session
        if key not in _GAUGES:
            spec = METRICS[key]
            _GAUGES[key] = Gauge(spec.name, description=spec.description, tag_keys=spec.tag_keys)
        return _GAUGES[key]


def _set(key: str, value: float, tags: dict[str, str]) -> None:
    value = float(value)
    if not math.isfinite(value):
        return
    gauge = get_gauge(key)
    if gauge is not None:
        gauge.set(value, tags=tags)


class ExperimentMetrics:
    """Driver-side gauges of one experiment (no-ops when Ray is not initialised).

    ``best_mrr`` keeps the maximum it has seen, per stage and overall, so callers may pass every
    observation; ``set_stage``, ``trials`` and ``budget_used`` set the current value.
    """

    def __init__(self, experiment: str = "kgtuner"):
        if not isinstance(experiment, str) or not experiment:
            raise ValueError(f"experiment must be a non-empty string, got {experiment!r}")
        self.experiment = experiment
        self._best: dict[str, float] = {}

    def set_stage(self, stage: int) -> None:
        """Current stage: 1 (subgraph), 2 (full graph), 0 before the search starts."""
        if stage not in (0, 1, 2):
            raise ValueError(f"stage must be 0, 1 or 2, got {stage!r}")
        _set("stage", stage, {"experiment": self.experiment})

    def best_mrr(self, value: float, stage: int | None = None) -> None:
        """Record a validation MRR observed in ``stage``; the gauges keep the best per stage and overall."""
        value = float(value)
        if not math.isfinite(value):
            return
        keys = ["all"] if stage is None else [str(int(stage)), "all"]
        for key in keys:
            if value > self._best.get(key, -math.inf):
                self._best[key] = value
                _set("best_valid_mrr", value, {"experiment": self.experiment, "stage": key})

    def best(self, stage: int | None = None) -> float | None:
        """The best MRR recorded so far (overall when ``stage`` is None), or None."""
        return self._best.get("all" if stage is None else str(int(stage)))

    def trials(self, running: int, finished: int, failed: int) -> None:
        """Current trial counts by state."""
        for state, count in (("running", running), ("finished", finished), ("failed", failed)):
            if count < 0:
                raise ValueError(f"trial count '{state}' must be >= 0, got {count!r}")
            _set("trials", count, {"experiment": self.experiment, "state": state})

    def budget_used(self, fraction: float) -> None:
        """Fraction of the budget used; clipped to [0, 1]."""
        _set("budget_used", min(max(float(fraction), 0.0), 1.0), {"experiment": self.experiment})


class TrialMetrics:
    """Trial-side gauges, tagged with the trial id and stage (no-ops when Ray is not initialised)."""

    def __init__(self, trial_id: str, stage: int, experiment: str = "kgtuner"):
        self.tags = {"experiment": str(experiment), "trial_id": str(trial_id), "stage": str(int(stage))}

    def valid_mrr(self, value: float) -> None:
        """Latest validation MRR of this trial."""
        _set("trial_valid_mrr", value, self.tags)

    def throughput(self, triples_per_s: float) -> None:
        """Training throughput in positive triples per second."""
        _set("trial_throughput", triples_per_s, self.tags)


#: Grafana panels over the exported series: (title, PromQL, unit).
PANELS: tuple[tuple[str, str, str], ...] = (
    ("Stage", f"max by (experiment) ({exported_name('stage')})", "none"),
    ("Best validation MRR (stage 'all' = overall)",
     f"max by (experiment, stage) ({exported_name('best_valid_mrr')})", "none"),
    ("Trials by state", f"max by (experiment, state) ({exported_name('trials')})", "none"),
    ("Budget used", f"max by (experiment) ({exported_name('budget_used')})", "percentunit"),
    ("Validation MRR per trial", f"max by (trial_id, stage) ({exported_name('trial_valid_mrr')})", "none"),
    ("Training throughput per trial (triples/s)",
     f"max by (trial_id, stage) ({exported_name('trial_throughput')})", "none"),
)


def grafana_dashboard() -> dict:
    """A Grafana dashboard (JSON model) with one time-series panel per entry of ``PANELS``.

    ``scripts/ops/metrics_stack.sh`` drops it next to Ray's own dashboards so Grafana provisions it; it uses
    the default Prometheus data source (the one Ray provisions).
    """
    panels = []
    for i, (title, expr, unit) in enumerate(PANELS):
        panels.append({
            "id": i + 1, "type": "timeseries", "title": title,
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "targets": [{"expr": expr, "refId": "A", "legendFormat": ""}],
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        })
    return {"uid": "kgtuner", "title": "kgtuner", "tags": ["kgtuner", "ray"], "timezone": "browser",
            "schemaVersion": 36, "refresh": "10s", "time": {"from": "now-6h", "to": "now"},
            "panels": panels}


if __name__ == "__main__":  # python -m kgtuner.cluster.metrics > kgtuner_dashboard.json
    import json

    print(json.dumps(grafana_dashboard(), indent=1))
