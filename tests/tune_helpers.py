"""Test doubles for the strategies' searchers: a settable timer and a minimal live driver."""

from __future__ import annotations

from kgtuner.tune.budget import BudgetClock


class FakeTimer:
    """A monotonic-clock stand-in: returns ``t``, which the test moves."""

    def __init__(self, t: float = 0.0):
        self.t = float(t)

    def __call__(self) -> float:
        return self.t


class Recorder:
    """A minimal live driver (``kgtuner.tune.events.activate`` it): a budget clock on a fake timer, every
    event it receives in ``events`` (the event objects), and the early stops the scheduler reported."""

    def __init__(self):
        self.timer = FakeTimer()
        self.clock = BudgetClock(timer=self.timer)
        self.events = []
        self.early_stopped = {}

    def elapsed(self) -> float:
        return self.clock.elapsed()

    def notify(self, event) -> None:
        from kgtuner.tune import events

        self.events.append(event)
        if isinstance(event, events.TrialEarlyStopped):
            self.early_stopped[event.trial_id] = event

    def early_stop_of(self, trial_id):
        return self.early_stopped.get(trial_id)

    def of(self, kind) -> list:
        """The events of type ``kind`` received so far."""
        return [e for e in self.events if isinstance(e, kind)]


def set_dotted(cfg: dict, overrides: dict) -> dict:
    """Apply ``{"a.b.c": value}`` overrides to a nested config dict in place; return it."""
    for dotted, value in overrides.items():
        node = cfg
        *parents, last = dotted.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    return cfg


def experiment_config(num_gpus: int = 8, **over) -> dict:
    """A minimal composed config (KGTuner on the demo, tiny trials, ``num_gpus`` logical GPUs) with dotted
    ``over``rides, for ``ExperimentSettings.from_config``."""
    cfg = {
        "data": {"name": "demo"}, "model": {"name": "complex"}, "space": {"name": "decoupled"},
        "search": {"name": "kgtuner", "subgraph_ratio": 0.2, "subgraph_sampler": "multi_rw"},
        "budget": {"seconds": 60, "trials": None},
        "trial": {"gpus": 1, "cpus": "auto", "stage1": {"max_steps": 10, "valid_every": 5, "patience": 2},
                  "stage2": {"max_steps": 10, "valid_every": 5, "patience": 2}},
        "cluster": {"num_gpus": num_gpus}, "final": {"seeds": 0},
    }
    return set_dotted(cfg, over)
