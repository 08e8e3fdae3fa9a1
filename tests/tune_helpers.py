"""Test doubles for the coordinator's searchers: a settable timer and a minimal live coordinator."""

from __future__ import annotations

from kgtuner.tune.budget import BudgetClock


class FakeTimer:
    """A monotonic-clock stand-in: returns ``t``, which the test moves."""

    def __init__(self, t: float = 0.0):
        self.t = float(t)

    def __call__(self) -> float:
        return self.t


class Recorder:
    """A minimal live coordinator (``kgtuner.tune.context.activate`` it): a budget clock on a fake timer,
    and every searcher event it receives in ``events``."""

    def __init__(self):
        self.timer = FakeTimer()
        self.clock = BudgetClock(timer=self.timer)
        self.events = []

    def on_stage1_ended(self):
        self.events.append("stage1_ended")

    def on_stage_switched(self, top, candidates, wait_s=0.0):
        self.events.append(("switched", len(top), len(candidates)))
        self.switch_wait_s = wait_s

    def on_switch_grace_passed(self, running, latest):
        self.events.append(("grace_passed", tuple(running)))

    def on_round_started(self, round_no, configs, previous):
        self.events.append(("round", round_no, configs, previous))

    def on_stage2_impossible(self, message):
        self.events.append(("impossible", message))

    def on_search_finished(self):
        self.events.append("finished")


def set_dotted(cfg: dict, overrides: dict) -> dict:
    """Apply ``{"a.b.c": value}`` overrides to a nested config dict in place; return it."""
    for dotted, value in overrides.items():
        node = cfg
        *parents, last = dotted.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    return cfg
