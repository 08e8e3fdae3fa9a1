"""What a replay refuses, skips or charges (issue 42's error paths, and the searcher's charged time): a truncated
table file is one line naming it, a refused grid writes nothing, a damaged sibling journal is skipped with a warning,
and a charged searcher's CPU seconds delay the trials it starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kgtuner.bench.replay import ReplayTable, replay
from kgtuner.errors import ConfigError
from replay_helpers import _strategy, _table as _synthetic_table

REPO = Path(__file__).resolve().parents[1]


def _table() -> ReplayTable:
    """An older (unpriced) synthetic table: its seconds are what a trial costs."""
    return _synthetic_table(priced=False, expand_top=10, ndec=0)


def _demo_table_copy(tmp_path) -> Path:
    import shutil

    table = tmp_path / "table"
    shutil.copytree(REPO / "docs/benchmarks/tables/demo", table)
    return table


def _cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("name", ["runs.parquet", "curves.parquet"])
def test_a_truncated_table_file_is_one_line_naming_it(tmp_path, name):
    from kgtuner.bench.restore import restore_journal

    table = _demo_table_copy(tmp_path)
    _cut_in_half(table / name)
    for read in (lambda: ReplayTable.load(table), lambda: restore_journal(table, tmp_path / "journal")):
        with pytest.raises(ConfigError) as err:
            read()
        text = str(err.value)
        assert "\n" not in text and str(table / name) in text and "not a readable Parquet file" in text, text
    assert not (tmp_path / "journal").exists()


def test_the_replay_and_restore_commands_refuse_a_truncated_table_in_one_line(tmp_path):
    table = _demo_table_copy(tmp_path)
    _cut_in_half(table / "runs.parquet")
    kgtuner = str(Path(sys.executable).with_name("kgtuner"))
    for args in (["replay", "--table", str(table), "--out", str(tmp_path / "out"), "--algorithms", "random",
                  "--workers", "1", "--budgets", "1", "--seeds", "1"],
                 ["restore", "--table", str(table), "--out", str(tmp_path / "journal")]):
        proc = subprocess.run([kgtuner, "bench", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kgtuner: error: "), proc.stderr[-3000:]
        assert str(table / "runs.parquet") in lines[0] and "not a readable Parquet file" in lines[0]
    assert not (tmp_path / "out" / "journal.jsonl").exists() and not (tmp_path / "journal").exists()


def test_a_refused_replay_writes_nothing_so_the_corrected_command_runs_in_the_same_folder(tmp_path):
    """Issue 42: every algorithm's settings are checked before the journal's header (or any result) is written."""
    from kgtuner.bench.benchmark import BenchmarkSettings, ResultsJournal, run_benchmark

    table = _table()
    journal = tmp_path / "out" / "journal.jsonl"
    grid = dict(workers=(1,), budgets=(1.0,), seeds=1)
    bad = BenchmarkSettings(algorithms=("random", "kgtuner[top_k=-3]"), **grid)
    with pytest.raises(ConfigError, match=r"algorithm 'kgtuner\[top_k=-3\]': search.top_k must be a whole number"):
        run_benchmark(table, bad, journal)
    assert not journal.exists() or ResultsJournal(journal).read() == (None, [])
    fixed = BenchmarkSettings(algorithms=("random", "kgtuner[top_k=3,searcher.n_trees=30,searcher.n_candidates=500,"
                                                    "stage2_searcher.n_trees=30]"), **grid)
    rows = run_benchmark(table, fixed, journal)
    assert len(rows) == 2 and ResultsJournal(journal).read()[0]["settings"] == fixed.to_dict()


def test_a_sibling_journal_that_cannot_be_read_is_skipped_with_a_warning_and_only_its_own_journal_refuses(
        tmp_path, capsys):
    """Issue 42: one sibling grid's damaged journal (OUT/../*/journal.jsonl) made every replay in that parent exit 2
    and told the user to move the sibling's results away; it is skipped, with one line naming it."""
    from kgtuner.bench.benchmark import BenchmarkSettings, run_benchmark

    table = _table()
    settings = BenchmarkSettings(algorithms=("random",), workers=(1,), budgets=(1.0,), seeds=2)
    good = run_benchmark(table, settings, tmp_path / "a" / "journal.jsonl")
    lines = (tmp_path / "a" / "journal.jsonl").read_text().splitlines()
    broken = tmp_path / "broken" / "journal.jsonl"  # a bad line in the middle: not a line cut by a kill
    broken.parent.mkdir()
    broken.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    odd = tmp_path / "odd" / "journal.jsonl"  # JSON, but not a results journal's
    odd.parent.mkdir()
    header = {"kind": "header", "graph": "demo", "table": str(table.source), "mean_trial_s": "soon"}
    odd.write_text(json.dumps(header) + "\n"
                   + json.dumps({"kind": "result", "row": {"algorithm": "random"}}) + "\n")
    binary = tmp_path / "binary" / "journal.jsonl"
    binary.parent.mkdir()
    binary.write_bytes(b"\xff\xfe\x00garbage\n")
    capsys.readouterr()
    rows = run_benchmark(table, settings, tmp_path / "c" / "journal.jsonl",
                         reuse=[broken, odd, binary, tmp_path / "a" / "journal.jsonl"])
    assert [r["test_mrr"] for r in rows] == [r["test_mrr"] for r in good]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("kgtuner: warning: ") for line in err), err
    for line, path in zip(err, (broken, odd, binary)):
        assert str(path) in line and "skipped" in line, line
    assert ":2 is not JSON" in err[0]
    # this replay's own journal with a bad line still refuses it (its results are at stake)
    with pytest.raises(ConfigError, match=r"broken/journal.jsonl:2 is not JSON"):
        run_benchmark(table, settings, broken, reuse=[tmp_path / "a" / "journal.jsonl"])


class _SlowSearcher:
    """A searcher proxy that computes for ``cpu_s`` CPU seconds before each suggestion (a busy loop: CPU time)."""

    def __init__(self, inner, cpu_s):
        self.inner, self.cpu_s = inner, cpu_s

    def suggest(self, trial_id):
        import time

        t = time.process_time()
        while time.process_time() - t < self.cpu_s:
            pass
        return self.inner.suggest(trial_id)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_charged_searcher_delays_the_trials_it_starts_and_an_uncharged_one_does_not(monkeypatch):
    table = _table()
    starts = {}
    for charge in (False, True):
        strategy = _strategy("search=random", "budget.seconds=400", "budget.trials=null")
        make = strategy.searcher
        monkeypatch.setattr(strategy, "searcher", lambda space, workers: _SlowSearcher(make(space, workers), 0.05))
        res = replay(strategy, table, workers=2, charge_searcher=charge)
        rows = pd.DataFrame(res.rows).sort_values("start_s")
        starts[charge] = rows["start_s"].tolist()
        assert res.searcher_s >= 0.05 * len(res.suggestions)
    assert starts[False][:2] == [0.0, 0.0]  # both workers start at once: the searcher costs nothing on the clock
    # charged: one driver computes the suggestions one after the other, each >= 0.05 CPU s
    assert starts[True][0] >= 0.05 and starts[True][1] >= starts[True][0] + 0.05
    # every later trial waits for its suggestion too: no start coincides with the uncharged replay's
    assert all(c > u for c, u in zip(starts[True][2:], starts[False][2:]))
