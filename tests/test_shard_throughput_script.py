"""scripts/benchmarks/shard_throughput.py: per-session hours of the answers' seeds and the per-step slowdown of
runs recorded in shards, computed from a journal."""

from __future__ import annotations

import runpy

from kgtuner.bench.journal import Journal

from record_helpers import REPO


def test_the_script_reports_each_sessions_hours_and_the_step_slowdown(tmp_path, capsys):
    j = Journal(tmp_path / "journal.jsonl")
    j.append({"kind": "session", "started_unix": 0.0, "shard": None})
    j.append({"kind": "session", "started_unix": 100.0, "shard": "1/2"})
    run = dict(kind="run", seconds_total=60.0, seconds_train=50.0, steps=100)
    j.append({**run, "run_id": "full-0001-b128-d100-s0", "phase": "main", "session_unix": 0.0, "ended_unix": 50.0})
    j.append({**run, "run_id": "full-0001-b128-d100-s1", "phase": "answers", "session_unix": 0.0, "ended_unix": 60.0})
    j.append({**run, "run_id": "full-0001-b128-d100-s2", "phase": "answers", "session_unix": 100.0, "ended_unix": 3700.0,
              "seconds_train": 60.0, "seconds_total": 3600.0})
    runpy.run_path(str(REPO / "scripts" / "benchmarks" / "shard_throughput.py"), run_name="not_main")["main"](str(tmp_path))
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["01-01", "00:00", "-", "1", "0.02", "0.02"]
    assert out[2].split() == ["01-01", "00:01", "1/2", "1", "1.00", "1.00"]
    assert "in shards: 1 runs; training seconds per step over their seed-0 run's: median 1.200" in out[3]
    assert "one process: 1 runs; training seconds per step over their seed-0 run's: median 1.000" in out[4]
