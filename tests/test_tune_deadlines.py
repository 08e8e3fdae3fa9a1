"""The budget clock that starts at the first ready trial, and the deadlines trials read from Ray's KV store."""

from __future__ import annotations

import math
import time

import pytest
from tune_helpers import FakeTimer

from kgtuner.tune.budget import BudgetClock
from kgtuner.tune.deadlines import DeadlineWatch

pytestmark = pytest.mark.serial  # starts Ray or kgtuner launches: one at a time (make test)


def test_clock_made_stopped_stands_at_its_offset_until_started():
    timer = FakeTimer(100.0)
    clock = BudgetClock(offset=7.0, timer=timer, running=False)
    timer.t += 30
    assert not clock.running and clock.elapsed() == 7.0
    assert clock.unix_time_at(20.0) == math.inf  # no deadline before the clock runs
    clock.start()
    timer.t += 2
    assert clock.running and clock.elapsed() == pytest.approx(9.0)
    clock.start()  # a running clock is left alone
    assert clock.elapsed() == pytest.approx(9.0)
    deadline = clock.unix_time_at(20.0)
    assert deadline == pytest.approx(time.time() + 11.0, abs=0.5)


def test_clock_start_backdates_to_the_ready_mark():
    timer = FakeTimer(100.0)
    clock = BudgetClock(timer=timer, running=False)
    clock.start(since_unix=time.time() - 3.0)
    assert clock.elapsed() == pytest.approx(3.0, abs=0.2)
    future = BudgetClock(timer=timer, running=False)
    future.start(since_unix=time.time() + 50)  # a clock skew into the future counts as now
    assert future.elapsed() == pytest.approx(0.0)


def test_deadline_watch_reads_the_store_at_most_every_ttl():
    timer = FakeTimer(100.0)
    reads = []
    published = {}

    def reader(key):
        reads.append(key)
        return dict(published)

    watch = DeadlineWatch("exp", stage=1, fallback=math.inf, ttl=0.5, reader=reader, timer=timer)
    assert watch.unix() == math.inf and not watch.passed()
    published[1] = time.time() - 1.0
    assert watch.unix() == math.inf  # cached within the ttl
    timer.t += 0.6
    assert watch.passed() and len(reads) == 2
    assert DeadlineWatch("exp", stage=2, reader=reader, timer=timer).unix() == math.inf  # other stage: none


def test_deadline_watch_keeps_its_value_when_the_store_fails():
    timer = FakeTimer(100.0)
    state = {"fail": False}

    def reader(key):
        if state["fail"]:
            raise ConnectionError("GCS gone")
        return {2: 123.0}

    watch = DeadlineWatch("exp", stage=2, fallback=999.0, ttl=0.1, reader=reader, timer=timer)
    assert watch.unix() == 123.0
    state["fail"] = True
    timer.t += 1
    assert watch.unix() == 123.0
    assert DeadlineWatch(None, stage=2, fallback=5.0, reader=reader).unix() == 5.0  # no key: the fallback


def test_deadlines_round_trip_through_ray_kv():
    ray = pytest.importorskip("ray")
    from kgtuner.tune import deadlines

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        key = "test-deadlines"
        deadlines.clear(key)
        assert deadlines.ready_since(key) is None
        t0 = time.time()
        deadlines.mark_ready(key)
        first = deadlines.ready_since(key)
        deadlines.mark_ready(key)  # the first mark wins
        assert deadlines.ready_since(key) == first and first >= t0 - 1
        deadlines.publish(key, {1: t0 + 5.0, 2: math.inf})
        assert DeadlineWatch(key, 1).unix() == pytest.approx(t0 + 5.0)
        assert DeadlineWatch(key, 2, fallback=1.0).unix() == math.inf
        deadlines.clear(key)
        assert DeadlineWatch(key, 1, fallback=2.0).unix() == 2.0
    finally:
        if started:
            ray.shutdown()
