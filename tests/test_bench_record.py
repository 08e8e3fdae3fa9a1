"""``kgtuner bench``: recorded tables of real training runs (pools, one run, the journal, Parquet and card).

Everything records on the shipped demo graph with tiny pools and caps; one slow test kills a recording in the
middle and restarts it. Restoring a journal from its table: test_bench_restore.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pandas as pd
import torch
import pyarrow.parquet as pq
import pytest

from kgtuner.bench import pool as bp
from kgtuner.bench import record as br
from kgtuner.bench import table as bt
from kgtuner.errors import ConfigError
from replay_helpers import run_benchmark_script

from record_helpers import REPO, tiny


# ------------------------------------------------------------------------------------ pools
def test_pools_are_drawn_from_fixed_seeds_and_match_the_stage1_table_script():
    s = tiny()
    a, b = bp.Pools(s, "demo"), bp.Pools(s, "demo")
    assert a.stage1_configs() == b.stage1_configs() and a.full_configs() == b.full_configs()
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != bp.Pools(tiny(seed=1), "demo").fingerprint()
    from kgtuner.search import load_space
    import numpy as np

    space = load_space("decoupled", model="complex", dataset="demo")  # scripts/data/kge_trial_table.py's draw
    assert a.stage1_configs() == [space.to_config(r) for r in space.sample_array(np.random.default_rng(0), 5)]
    assert a.stage1_sizes() == (128, 100)  # the decoupled space's fixed stage-1 sizes
    assert a.expand_sizes() == [(256, 200), (256, 400), (512, 200), (512, 400)]  # the space's demo exception
    assert set(a.expand_sizes()) == {(int(c["batch_size"]), int(c["dim"]))
                                     for c in a.stage1_space.expand_stage2(a.stage1_configs()[0])}
    # a codex-m pool expands to the space's own stage-2 sizes
    assert bp.Pools(tiny(), "codex-m").expand_sizes() == [(512, 1000), (512, 2000), (1024, 1000), (1024, 2000)]
    assert a.planned_counts() == {"stage1": 5 + 2, "expand": 4 + 1, "full": 3 + 1}


def test_expansions_and_noise_follow_fixed_rules_on_the_results():
    p = bp.Pools(tiny(stage1_configs=6, expand_top=2, noise_stage1_top=1, noise_stage1_random=2,
                       noise_stage1_seeds=3), "demo")
    mrr = [0.3, None, 0.5, 0.5, 0.1, 0.2]  # a failed run (None) ranks last; ties by index
    rows = [{"run_id": f"stage1-{i}", "pool": "stage1", "seed": 0, "config_index": i, "config": c,
             "best_valid_mrr": mrr[i]} for i, c in enumerate(p.stage1_configs())]
    assert p.expand_indices(rows) == [2, 3]
    runs = p.main_runs("expand", rows)
    assert [(r.index, r.config["batch_size"], r.config["dim"]) for r in runs] == \
        [(i, b, d) for i in (2, 3) for b, d in p.expand_sizes()]
    assert all({k: v for k, v in r.config.items() if k not in ("batch_size", "dim")}
               == {k: v for k, v in p.stage1_configs()[r.index].items() if k not in ("batch_size", "dim")} for r in runs)
    noise = p.noise_runs("stage1", rows)
    assert noise == p.noise_runs("stage1", list(reversed(rows)))  # independent of the rows' order
    picked = list(dict.fromkeys(r.index for r in noise))
    assert picked[0] == 2 and len(picked) == 3 and 1 not in picked  # the top one, then 2 random non-failed
    assert [r.seed for r in noise] == [1, 2] * 3


def test_settings_are_validated():
    with pytest.raises(ConfigError, match="unknown recording setting"):
        bp.RecordSettings.from_dict({"dataset": "demo", "caps": 3})
    assert bp.trial_defaults("paper") == {"trial": "paper", "patience": 5, "stage1_max_valid_triples": 5000}
    assert bp.trial_defaults("demo")["patience"] == 4
    with pytest.raises(ConfigError, match="unknown trial preset"):
        bp.trial_defaults("nope")


# ------------------------------------------------------------------------------------ one run
@pytest.fixture(scope="module")
def demo_graph():
    from kgtuner.data import FilterIndex, load_dataset

    kg = load_dataset("demo")
    return kg, FilterIndex.from_graph(kg)


CFG = {"negatives": 32, "loss": "BCE_adv", "adv_weight": 1.0, "regularizer": "DURA", "reg_weight": 1e-4,
       "dropout": 0.0, "optimizer": "Adam", "lr": 0.01, "initializer": "xavier_uniform", "batch_size": 512,
       "dim": 32, "inverse": False}


def _controls(**kw):
    return {"max_epochs": 2, "max_steps": None, "valid_every": 5, "patience": 5, "max_valid_triples": None, **kw}


def _check_curve(run):
    curve = run["curve"]
    assert [p["step"] for p in curve] == sorted({p["step"] for p in curve})
    for key in ("train_s", "valid_s"):
        values = [p[key] for p in curve]
        assert values == sorted(values) and values[0] >= 0
    assert curve[-1]["train_s"] <= run["seconds"]["train"] + 1e-9
    assert curve[-1]["valid_s"] <= run["seconds"]["valid"] + 1e-9
    assert all(p["final"] == (p["step"] % 5 != 0) for p in curve)


def test_a_run_ends_by_its_epochs_with_test_metrics_at_its_best_validation(demo_graph):
    kg, fi = demo_graph
    run = br.train_config(kg, CFG, model="complex", controls=_controls(), filter_index=fi)
    assert run["status"] == "ok" and run["stop_reason"] == "epochs" and run["error"] is None
    assert run["epochs"] == 2.0 and run["steps"] == 2 * run["steps_per_epoch"]
    assert run["best_valid"]["mrr"] == max(p["valid_mrr"] for p in run["curve"])
    assert run["best_step"] in [p["step"] for p in run["curve"]] and 0 < run["test"]["mrr"] <= 1
    assert run["threads"] >= 1 and run["seconds"]["test"] > 0
    s = run["seconds"]
    assert s["total"] >= s["setup"] + s["train"] + s["valid"] + s["test"] - 1e-6
    _check_curve(run)


def test_a_run_stops_at_its_cap_then_validates_and_tests_once(demo_graph):
    kg, fi = demo_graph
    run = br.train_config(kg, {**CFG, "dim": 400, "negatives": "1VsAll", "loss": "CE", "batch_size": 64},
                          model="complex", controls=_controls(max_epochs=50, valid_every=100000), filter_index=fi,
                          cap_s=0.5)
    assert run["status"] == "ok" and run["stop_reason"] == "time_cap", run
    assert 0 < run["steps"] < 50 * run["steps_per_epoch"]
    assert len(run["curve"]) == 1 and run["curve"][0]["final"] and run["curve"][0]["step"] == run["steps"]
    assert run["best_valid"] is not None and run["test"] is not None
    assert run["seconds"]["train"] >= 0.5 - 0.05


def test_the_cpu_clock_leaves_out_time_the_process_does_not_compute_and_the_wall_clock_counts_it(demo_graph):
    """clock=cpu (the default) measures a run's seconds and cap in this process's CPU time, so time it spends
    waiting (here: a sleep inside every evaluation, as a loaded machine's other processes would take) is not
    charged; clock=wall charges it."""
    import time as _time

    from kgtuner.kge import Trainer

    kg, fi = demo_graph
    evaluate = Trainer.evaluate

    def slow(self, split, model=None):
        _time.sleep(0.3)
        return evaluate(self, split, model)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a recording trains: process CPU time is then this thread's time
    br.train_config(kg, CFG, model="complex", controls=_controls(max_epochs=1), filter_index=fi)  # warm-up
    Trainer.evaluate = slow
    try:
        runs = {c: br.train_config(kg, CFG, model="complex", controls=_controls(max_epochs=1), filter_index=fi,
                                   clock=c) for c in ("cpu", "wall")}
    finally:
        Trainer.evaluate = evaluate
        torch.set_num_threads(threads)
    n_eval = {c: len(r["curve"]) for c, r in runs.items()}
    assert n_eval["cpu"] == n_eval["wall"] >= 1
    assert runs["wall"]["seconds"]["valid"] >= 0.3 * n_eval["wall"] - 1e-3 and runs["wall"]["seconds"]["test"] >= 0.3
    assert runs["cpu"]["seconds"]["valid"] < 0.3 * n_eval["cpu"] - 0.1 and runs["cpu"]["seconds"]["test"] < 0.25
    assert runs["cpu"]["seconds"]["total"] < runs["wall"]["seconds"]["total"] - 0.3 * n_eval["wall"]
    _check_curve(runs["cpu"])
    assert br.RecordSettings(dataset="demo").clock == "cpu"
    with pytest.raises(ConfigError, match="clock='sundial'"):
        bp.RecordSettings.from_dict({"dataset": "demo", "clock": "sundial"})


def test_a_journal_begun_before_the_clock_setting_continues_on_the_wall_clock(tmp_path):
    """A journal whose header predates ``clock`` was recorded on the wall clock: it continues so (its settings
    are fixed), and today's default (cpu) is refused for it rather than mixed into it."""
    s = tiny(stage1_configs=1, full_configs=0, expand_top=0, clock="wall")
    br.record(s, tmp_path, log=lambda line: None, pools=["stage1"])
    journal = tmp_path / "journal.jsonl"
    lines = journal.read_text().splitlines()
    header = json.loads(lines[0])
    assert header["kind"] == "header"
    del header["settings"]["clock"]  # as written before the setting existed
    journal.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    from kgtuner.bench.cli import settings_for

    settings, resumed = settings_for("demo", tmp_path, {})
    assert resumed and settings.clock == "wall"
    br.record(settings, tmp_path, log=lambda line: None, pools=["stage1"])  # continues
    with pytest.raises(ConfigError, match="clock: journal 'wall' vs now 'cpu'"):
        br.record(tiny(stage1_configs=1, full_configs=0, expand_top=0), tmp_path, log=lambda line: None)


def test_a_recording_continues_when_its_dataset_folder_is_spelled_another_way(tmp_path, monkeypatch):
    """The journal keeps the folder as first given (here absolute); continuing from a command that spells it
    relative to the current directory is the same recording, while another folder is refused."""
    from kgtuner.bench.cli import settings_for
    data = tmp_path / "data" / "mini"
    data.mkdir(parents=True)
    other = tmp_path / "data" / "other"
    other.mkdir()
    out = tmp_path / "journal"
    out.mkdir()
    header = {"kind": "header", "settings": {**tiny().to_dict(), "dataset": str(data.resolve())}}
    (out / "journal.jsonl").write_text(json.dumps(header) + "\n")
    monkeypatch.chdir(tmp_path)
    settings, resumed = settings_for("data/mini", out, {})
    assert resumed and settings.dataset == str(data.resolve())
    settings, _ = settings_for("data/other", out, {})
    assert settings.dataset == "data/other"  # another folder: an explicit change, which check_header refuses


def test_a_run_stops_by_patience(demo_graph):
    kg, fi = demo_graph
    run = br.train_config(kg, {**CFG, "lr": 1e-12}, model="complex",
                          controls=_controls(max_epochs=100, valid_every=1, patience=2), filter_index=fi)
    assert run["stop_reason"] == "patience" and run["status"] == "ok"
    assert len(run["curve"]) == 3 and run["epochs"] < 100


def test_a_failing_configuration_is_a_row_with_its_error(demo_graph):
    kg, fi = demo_graph
    run = br.train_config(kg, {**CFG, "loss": "nope"}, model="complex", controls=_controls(), filter_index=fi)
    assert run["status"] == "failed" and run["stop_reason"] == "failed" and "loss='nope'" in run["error"]
    assert run["best_valid"] is None and run["curve"] == []


# ------------------------------------------------------------------------------------ journal
def test_the_journal_drops_a_line_cut_by_a_kill(tmp_path):
    j = br.Journal(tmp_path / "j.jsonl")
    j.append({"kind": "run", "run_id": "a"})
    with j.path.open("a") as fh:
        fh.write('{"kind": "run", "run_id": "b", "cu')  # killed while writing
    assert [r["run_id"] for r in j.read()] == ["a"]
    assert j.repair() > 0
    j.append({"kind": "run", "run_id": "c"})
    assert [r["run_id"] for r in j.read()] == ["a", "c"]
    assert j.path.read_text().count("\n") == 2


def test_a_restart_skips_finished_runs_and_duplicates_none(tmp_path):
    s = tiny(stage1_configs=3, full_configs=2, noise_stage1_seeds=1, noise_expand_seeds=1, noise_full_seeds=1)
    out = tmp_path / "rec"
    first = br.record(s, out, log=lambda line: None, max_runs=2)
    assert first == {"runs": 2, "recorded_now": 2, "complete": False}
    before = {r["run_id"]: r for r in br.Journal(out / "journal.jsonl").read() if r.get("kind") == "run"}
    with (out / "journal.jsonl").open("a") as fh:
        fh.write('{"kind": "run", "run_id": "stage1-0002')  # a kill while appending the third run
    lines = []
    second = br.record(s, out, log=lines.append)
    assert second["complete"] and second["recorded_now"] == second["runs"] - 2
    header, sessions, runs = bt.load_journal(out)
    ids = [r["run_id"] for r in br.Journal(out / "journal.jsonl").read() if r.get("kind") == "run"]
    assert len(ids) == len(set(ids)) == sum(bp.Pools(s, "demo").planned_counts().values())
    for rid, row in before.items():  # the finished runs were kept, not retrained
        assert next(r for r in runs if r["run_id"] == rid)["ended_unix"] == row["ended_unix"]
    assert len(sessions) == 2 and header["settings"] == s.to_dict()
    assert sum(line.startswith("[") for line in lines) == second["recorded_now"]  # a progress line per run
    assert br.record(s, out, log=lambda line: None)["recorded_now"] == 0
    assert len(bt.load_journal(out)[1]) == 2  # nothing left to record: no session (commit, host) added to the card


def test_settings_are_fixed_once_the_journal_exists(tmp_path):
    s = tiny(stage1_configs=1, full_configs=0, expand_top=0)
    br.record(s, tmp_path, log=lambda line: None, pools=["stage1"])
    with pytest.raises(ConfigError, match="full_cap_s: journal 0.3 vs now 9"):
        br.record(tiny(stage1_configs=1, full_configs=0, expand_top=0, full_cap_s=9), tmp_path, log=lambda line: None)


def test_one_recording_per_journal(tmp_path):
    import fcntl

    s = tiny(stage1_configs=1, full_configs=0, expand_top=0)
    out = tmp_path / "locked"
    out.mkdir()
    with (out / "record.lock").open("a") as fh:  # another recording holds the journal's lock
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ConfigError, match="another `kgtuner bench record` is recording"):
            br.record(s, out, log=lambda line: None)
    # a recording started before the lock existed: its session's process is alive
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "bench", "record"])
    try:
        br.Journal(tmp_path / "old" / "journal.jsonl").append({"kind": "session", "pid": live.pid})
        with pytest.raises(ConfigError, match=f"still running \\(pid {live.pid}"):
            br.record(s, tmp_path / "old", log=lambda line: None)
    finally:
        live.kill()
        live.wait()


# ------------------------------------------------------------------------------------ tables and card
def test_the_parquet_tables_have_the_fixed_schema(recorded):
    s, out, tables, summary = recorded
    assert summary["complete"]
    assert pq.read_schema(tables / "runs.parquet").remove_metadata() == bt.RUN_SCHEMA
    assert pq.read_schema(tables / "curves.parquet").remove_metadata() == bt.CURVE_SCHEMA
    runs = pd.read_parquet(tables / "runs.parquet")
    curves = pd.read_parquet(tables / "curves.parquet")
    assert runs["run_id"].is_unique and len(runs) == sum(bp.Pools(s, "demo").planned_counts().values())
    assert set(runs["stop_reason"]) <= set(br.TABLE_STOP_REASONS) and "time_cap" in set(runs["stop_reason"])
    assert set(runs["threads"]) == {1}
    for _, r in runs.iterrows():
        cfg = json.loads(r["config_json"])
        assert (cfg["batch_size"], cfg["dim"]) == (r["batch_size"], r["dim"]) and str(cfg["negatives"]) == r["negatives"]
    sub = runs[runs["pool"] == "stage1"]
    assert sub["test_mrr"].isna().all() and (sub["graph"] == "demo-multi_rw-0.2-seed0").all()
    assert (sub[["batch_size", "dim"]] == [128, 100]).all().all()
    ok = runs[(runs["pool"] != "stage1") & (runs["status"] == "ok")]
    assert ok["test_mrr"].notna().all() and (ok["graph"] == "demo").all()
    exp = runs[runs["pool"] == "expand"]
    assert (exp["stage1_rank"] == 1).all() and exp["stage1_valid_mrr"].notna().all()
    # every run's curve: increasing steps, monotonic cumulative seconds, its best point is the run's best
    assert set(curves["run_id"]) <= set(runs["run_id"])
    for rid, c in curves.groupby("run_id"):
        c = c.sort_values("point")
        assert c["step"].is_monotonic_increasing and c["train_s"].is_monotonic_increasing
        assert c["valid_s"].is_monotonic_increasing and c["seconds"].is_monotonic_increasing
        row = runs.set_index("run_id").loc[rid]
        assert row["n_valid"] == len(c) and abs(c["valid_mrr"].max() - row["best_valid_mrr"]) < 1e-12
        assert c["seconds"].iloc[-1] <= row["seconds_train"] + row["seconds_valid"] + 1e-9


def _card_rows(text: str) -> dict[str, list[str]]:
    section = text.split("## Runs by pool and stop reason", 1)[1].split("\n\n")[1]
    rows = [line.strip("|").split("|") for line in section.splitlines()[2:]]
    return {r[0].strip(): [c.strip() for c in r[1:]] for r in rows}


def test_the_card_counts_come_from_the_data(recorded, tmp_path):
    s, out, tables, _ = recorded
    text = (tables / "card.md").read_text()
    runs = pd.read_parquet(tables / "runs.parquet")
    rows = _card_rows(text)
    for pool, cells in rows.items():
        sel = runs[runs["pool"] == pool]
        assert int(cells[0]) == len(sel)
        for i, reason in enumerate(("patience", "epochs", "time_cap", "failed")):
            n = int(re.match(r"(\d+)", cells[2 + i]).group(1))
            assert n == (sel["stop_reason"] == reason).sum()
            if n:
                assert f"(ep {sel[sel['stop_reason'] == reason]['epochs'].median():.2f})" in cells[2 + i]
    assert "Complete" in text and "1 torch thread per run" in text and str(os.cpu_count()) + " cores" in text
    assert f"bench record --dataset demo --out {out}" in text  # the restart command
    # the card follows the data: without the last run the counts and the status change
    lines = (out / "journal.jsonl").read_text().splitlines()
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "journal.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    bt.finalize(partial, partial / "t")
    text2 = (partial / "t" / "card.md").read_text()
    last = json.loads(lines[-1])
    assert "Partial" in text2
    assert int(_card_rows(text2)[last["pool"]][0]) == int(rows[last["pool"]][0]) - 1
    assert len(pd.read_parquet(partial / "t" / "runs.parquet")) == len(runs) - 1


def test_the_card_lists_the_covered_expansions(recorded):
    s, out, tables, _ = recorded
    header, _, runs = bt.load_journal(out)
    cover = bt.expansion_coverage(header, runs)
    assert cover["covered_prefix"] == 1 and cover["stage1_complete"]
    assert cover["configs"][0]["sizes"] == sorted(tuple(x) for x in header["expand_sizes"])
    assert "the best 1 of the stage-1 ranking are all covered" in (tables / "card.md").read_text()
    data = json.loads((tables / "card.json").read_text())
    assert data["coverage"]["covered_prefix"] == 1 and data["coverage"]["expanded"][0][1] == 1


# ------------------------------------------------------------------------------------ command line
def test_the_command_line_records_and_reports(tmp_path, capsys):
    from kgtuner.cli import main

    out = tmp_path / "rec"
    args = ["bench", "record", "--dataset", "demo", "--out", str(out), "--stage1-configs", "2", "--full-configs", "1",
            "--expand-top", "0", "--max-epochs", "1", "--full-cap-s", "0.5", "--noise-stage1-seeds", "1",
            "--noise-full-seeds", "1", "--noise-expand-seeds", "1", "--stage1-max-valid-triples", "none",
            "--decoupled-configs", "0"]
    assert main(args) == 2  # one rule for every full-graph pool: the caps differ
    assert "one_rule: every full-graph pool needs the same cap" in capsys.readouterr().err
    args += ["--expand-cap-s", "0.5", "--decoupled-cap-s", "0.5"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert sum(line.startswith("[") for line in printed.splitlines()) == 3  # a progress line per run
    header = bt.load_journal(out)[0]
    assert header["settings"]["patience"] == 5 and header["settings"]["stage1_max_valid_triples"] is None
    assert header["command"].startswith("kgtuner bench record --dataset demo")
    assert main(["bench", "record", "--dataset", "demo", "--out", str(out)]) == 0  # restart: settings from the header
    assert "3 run(s) recorded (0 now)" in capsys.readouterr().out
    assert main(["bench", "record", "--dataset", "demo", "--out", str(out), "--max-epochs", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kgtuner: error: the journal was recorded with other settings") and "\n" not in err
    assert main(["bench", "report", "--journal", str(out), "--out", str(tmp_path / "t")]) == 0
    assert {p.name for p in (tmp_path / "t").iterdir()} == {"runs.parquet", "curves.parquet", "card.md", "card.json"}
    data = json.loads((tmp_path / "t" / "card.json").read_text())
    assert data["graph"] == "demo" and data["settings"] == header["settings"] and data["runs"] == 3
    assert data["counts"]["stage1"]["runs"] == 2 and data["counts"]["full"]["runs"] == 1
    assert main(["bench", "report", "--journal", str(tmp_path / "none")]) == 2


# ------------------------------------------------------------------------------------ kill and restart
@pytest.mark.slow
def test_a_recording_killed_in_the_middle_continues_without_duplicates(tmp_path):
    out = tmp_path / "rec"
    cmd = [sys.executable, "-m", "kgtuner.bench", "record", "--dataset", "demo", "--out", str(out),
           "--stage1-configs", "30", "--full-configs", "2", "--expand-top", "1", "--max-epochs", "3",
           "--expand-cap-s", "0.5", "--full-cap-s", "0.5", "--noise-stage1-seeds", "1", "--noise-expand-seeds", "1",
           "--noise-full-seeds", "1", "--cost", "measured", "--valid-unit", "steps", "--one-rule", "false",
           "--decoupled-configs", "0"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    journal = out / "journal.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:  # kill it once a few runs have finished
        if journal.is_file() and journal.read_text().count('"kind": "run"') >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_killed = sum(r.get("kind") == "run" for r in br.Journal(journal).read())
    assert 3 <= n_killed < 30 + 4 + 2
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    ids = [r["run_id"] for r in br.Journal(journal).read() if r.get("kind") == "run"]
    assert len(ids) == len(set(ids)) == 30 + 4 + 2
    assert f"{len(ids)} run(s) recorded ({len(ids) - n_killed} now); complete: True" in done.stdout
    header, sessions, _ = bt.load_journal(journal)
    assert len(sessions) == 2 and sum(r.get("kind") == "header" for r in br.Journal(journal).read()) == 1


@pytest.mark.slow
def test_the_benchmark_script_restores_a_recording_then_reports_replays_and_writes_the_page(recorded, tmp_path):
    """scripts/benchmarks/replay_benchmark.sh, the path a benchmark takes across sessions and machines: on a fresh
    checkout (no journal, the committed table) it rebuilds the journal, continues it (here complete: nothing is
    trained again), reports the table, checks it is complete, replays a grid and regenerates the page."""
    import shutil

    _, out, tables, _ = recorded  # recorded in this process: its session records name a live pid running "bench record"
    shutil.copytree(tables, tmp_path / "tables" / "demo")
    proc = run_benchmark_script(tmp_path, "--algorithms random rf_bore --workers 1 --budgets 2 --seeds 2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    planned = sum(json.loads((tmp_path / "tables" / "demo" / "card.json").read_text())["planned"].values())
    assert f"{planned} run(s), 1 session(s) -> {tmp_path / 'journals' / 'demo' / 'journal.jsonl'}" in proc.stdout
    assert f"demo: {planned} of {planned} planned runs recorded" in proc.stdout
    assert f"{planned} run(s) recorded (0 now)" in (tmp_path / "journals" / "demo" / "record.log").read_text()
    results = pd.read_parquet(tmp_path / "replay" / "demo" / "custom" / "results.parquet")
    assert len(results) == 2 * 2 and set(results["algorithm"]) == {"random", "rf_bore"}
    page = (tmp_path / "page.md").read_text()
    assert "## Search strategies replayed on recorded tables" in page and "#### Grid `custom`" in page
    assert len(pd.read_parquet(tmp_path / "replay" / "results.parquet")) == 4
    assert pq.read_table(tmp_path / "tables" / "demo" / "runs.parquet").equals(pq.read_table(tables / "runs.parquet"))
