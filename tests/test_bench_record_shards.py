"""``kgtuner bench record --shard k/n``: n processes recording one journal side by side (one core each), with locks
that keep a whole recording, the same shard twice and another split out, and a journal that several processes
append to (the whole-table path through the benchmark script with SHARDS=2: test_bench_answer_score.py)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import pytest

from kgtuner.bench import pool as bp
from kgtuner.bench import record as br
from kgtuner.bench import table as bt
from kgtuner.errors import ConfigError

from record_helpers import REPO


def test_a_shard_is_k_of_n_and_the_shards_split_every_plan_without_overlap():
    assert br.parse_shard("2/3") == (2, 3) and br.parse_shard(" 1 / 1 ") == (1, 1) and br.parse_shard(None) is None
    for bad in ("0/2", "3/2", "1/0", "a/b", "2", ""):
        with pytest.raises(ConfigError, match=f"--shard '{bad}': give k/n with 1 <= k <= n"):
            br.parse_shard(bad)
    for n in (1, 2, 3, 5):
        owners = [[k for k in range(1, n + 1) if br.in_shard(i, (k, n))] for i in range(23)]
        assert all(len(o) == 1 for o in owners)  # every run in exactly one shard
        counts = [sum(o == [k] for o in owners) for k in range(1, n + 1)]
        assert max(counts) - min(counts) <= 1  # in turn, so the shares differ by at most one run
    assert all(br.in_shard(i, None) for i in range(5))


def _hold(path, mode):
    fh = path.open("a+")
    fcntl.flock(fh.fileno(), mode | fcntl.LOCK_NB)
    return fh


def test_the_locks_let_shards_of_one_split_side_by_side_and_nothing_else(tmp_path):
    out = tmp_path / "j"
    out.mkdir()
    shard1 = _hold(out / "record.lock", fcntl.LOCK_SH), _hold(out / "record.shard-1-of-2.lock", fcntl.LOCK_EX)
    try:
        with pytest.raises(ConfigError, match="is recording a whole recording or another shard's process"):
            br._lock(out)  # a whole recording beside a shard
        with pytest.raises(ConfigError, match="is recording shard 1/2"):
            br._lock(out, (1, 2))  # the same shard twice
        with pytest.raises(ConfigError, match="a shard of another split"):
            br._lock(out / ".." / "j", (1, 3))  # another split would share the runs out otherwise
        assert br._other_shards_alive(out, (2, 2)) and not br._other_shards_alive(out, (1, 2))
        held = br._lock(out, (2, 2))  # the other shard of the split: allowed
        assert (out / "record.shard-2-of-2.lock").read_text() == f"{os.getpid()}\n"
        assert len(held) == 2
    finally:
        for fh in shard1:
            fh.close()
    assert not br._other_shards_alive(out, (2, 2))  # shard 1 has ended
    whole = tmp_path / "whole"
    whole.mkdir()
    with _hold(whole / "record.lock", fcntl.LOCK_EX):
        with pytest.raises(ConfigError, match="is recording a whole recording \\(no --shard\\)"):
            br._lock(whole, (1, 2))


def test_several_processes_append_whole_lines_and_a_line_cut_by_a_killed_one_is_dropped_alone(tmp_path):
    j = br.Journal(tmp_path / "journal.jsonl")
    code = ("import sys; from kgtuner.bench.journal import Journal; j = Journal(sys.argv[1]); "
            "[j.append({'kind': 'run', 'run_id': f'{sys.argv[2]}-{i}', 'pad': 'x' * 20000}) for i in range(60)]")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(j.path), name], env=env) for name in "ab"]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    ids = [r["run_id"] for r in j.read()]
    assert sorted(ids) == sorted(f"{n}-{i}" for n in "ab" for i in range(60))  # no line torn by the other's
    with j.path.open("a") as fh:
        fh.write('{"kind": "run", "run_id": "cut')  # a shard killed while writing; another one appends next
    j.append({"kind": "run", "run_id": "next"})
    assert [r["run_id"] for r in j.read()][-1] == "next" and len(j.read()) == 121


def test_a_shard_does_not_price_shapes(tmp_path):
    settings = bp.RecordSettings(dataset="demo", stage1_configs=2, full_configs=1, decoupled_configs=0, expand_top=1)
    assert settings.cost == "calibrated"
    with pytest.raises(ConfigError, match="not priced yet .* start this table without --shard"):
        br.record(settings, tmp_path / "new", log=lambda line: None, shard=(1, 2))
    assert not any(r.get("kind") == "calibration" for r in br.Journal(tmp_path / "new" / "journal.jsonl").read())


@pytest.mark.slow
def test_two_shards_record_a_whole_table_side_by_side_once(tmp_path):
    """From an empty journal: each shard waits for the other's stage-1 runs before the expansions, and together
    they record every planned run exactly once (the real command line, two processes at once)."""
    out = tmp_path / "rec"
    cmd = [sys.executable, "-m", "kgtuner.bench", "record", "--dataset", "demo", "--out", str(out),
           "--stage1-configs", "7", "--full-configs", "3", "--expand-top", "1", "--max-epochs", "2",
           "--expand-cap-s", "0.5", "--full-cap-s", "0.5", "--noise-stage1-seeds", "2", "--noise-stage1-top", "1",
           "--noise-stage1-random", "0", "--noise-expand-seeds", "1", "--noise-full-seeds", "1", "--cost", "measured",
           "--valid-unit", "steps", "--one-rule", "false", "--decoupled-configs", "0"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.run(cmd + ["--max-runs", "1"], capture_output=True, text=True, env=env, cwd=tmp_path,
                           timeout=300)  # the header (settings), as a recording is begun: by hand, whole
    assert first.returncode == 0, first.stdout + first.stderr
    procs = [subprocess.Popen(cmd + ["--shard", f"{k}/2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env, cwd=tmp_path) for k in (1, 2)]
    logs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    records = br.Journal(out / "journal.jsonl").read()
    ids = [r["run_id"] for r in records if r.get("kind") == "run"]
    planned = bp.Pools(bp.RecordSettings.from_dict(records[0]["settings"]), "demo").planned_counts()
    assert len(ids) == len(set(ids)) == sum(planned.values()) == 7 + 1 + 4 + 3
    assert any("complete: True" in log for log in logs)
    header, sessions, runs = bt.load_journal(out)
    by_session = {s["started_unix"]: s.get("shard") for s in sessions}
    shares = {k: {r["run_id"] for r in runs if by_session[r["session_unix"]] == k} for k in ("1/2", "2/2")}
    assert shares["1/2"] and shares["2/2"] and not shares["1/2"] & shares["2/2"]
    assert any(r["pool"] == "expand" for r in runs if by_session[r["session_unix"]] is not None)
    assert "up to 2 processes side by side" in bt.shards_text(sessions)
