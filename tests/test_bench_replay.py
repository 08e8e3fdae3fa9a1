"""The replay of real strategies on a recorded table (issue 22, part 2): simulated time, the pool mapping, stage
ends, ASHA, and the live-vs-replay equivalence (the same suggestions, once live and once replayed). What a replay
refuses or charges: test_bench_replay_errors.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from kgtuner.bench.pool import draw_configs
from kgtuner.bench.replay import ReplayTable, replay
from kgtuner.errors import ConfigError
from kgtuner.paths import CONF_DIR
from kgtuner.search import load_space
from kgtuner.tune import events
from kgtuner.tune.settings import ExperimentSettings

REPO = Path(__file__).resolve().parents[1]
SIZES = [(256, 200), (256, 400), (512, 200), (512, 400)]  # the demo's stage-2 expansion


# smaller forests than the defaults' 200 trees x 10,000 candidates: what these tests check (simulated time, the
# mapping, misses, stage ends, the live-vs-replay sequence) does not depend on the forest's size, and CI is 2 cores
SMALL_FOREST = {"kgtuner": ["search.searcher.n_trees=30", "search.searcher.n_candidates=2000",
                            "search.stage2_searcher.n_trees=30"],
                "rf_bore": ["search.searcher.n_trees=30", "search.searcher.n_candidates=2000"]}


def _strategy(*overrides):
    search = next((o.split("=", 1)[1] for o in overrides if o.startswith("search=")), None)
    small = [] if any(".n_trees=" in o for o in overrides) else SMALL_FOREST.get(search, [])
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["cluster.num_cpus=1", *small, *overrides])
    return ExperimentSettings.from_config(cfg).make_strategy()


def _value(cfg: dict) -> float:
    """A smooth made-up quality: best at lr = 1e-2, a bonus for loss=CE (the synthetic table's 'truth')."""
    return 0.5 - 0.1 * abs(math.log10(cfg["lr"]) + 2) + (0.1 if cfg["loss"] == "CE" else 0.0)


def _table(n1=40, nfull=30, expand_top=10, points=4, sec=10.0) -> ReplayTable:
    """A synthetic recorded table on the demo graph: curves rise to the configuration's value; each validation
    costs ``sec`` seconds (expansions twice that, the larger one more)."""
    s1 = load_space("decoupled", model="complex", dataset="demo")
    full = load_space("full", model="complex", dataset="demo")
    runs, curves = [], []

    def add(pool, index, cfg, per_point):
        rid = f"{pool}-{index:04d}-b{cfg['batch_size']}-d{cfg['dim']}-s0"
        v = _value(cfg)
        runs.append({"run_id": rid, "pool": pool, "config_index": index, "seed": 0, "batch_size": cfg["batch_size"],
                     "dim": cfg["dim"], "config_json": json.dumps(cfg), "status": "ok",
                     "seconds_total": per_point * points + 1.0, "test_mrr": v - 0.01, "error": None})
        for k in range(points):
            curves.append({"run_id": rid, "step": 100 * (k + 1), "seconds": per_point * (k + 1),
                           "valid_mrr": v * (k + 1) / points})

    stage1 = draw_configs(s1, n1, 0)
    for i, c in enumerate(stage1):
        add("stage1", i, c, sec)
    top = sorted(range(n1), key=lambda i: -_value(stage1[i]))[:expand_top]
    for i in top:
        for b, d in SIZES:
            add("expand", i, {**stage1[i], "batch_size": b, "dim": d}, sec * 2 * (b * d) / (256 * 200))
    for i, c in enumerate(draw_configs(full, nfull, 1000)):
        add("full", i, c, sec * 2)
    return ReplayTable(pd.DataFrame(runs), pd.DataFrame(curves), graph="demo")


def test_a_one_stage_search_pays_the_recorded_seconds_on_every_worker():
    table = _table()
    res = replay(_strategy("search=random", "budget.seconds=400", "budget.trials=null"), table, workers=4)
    rows = pd.DataFrame(res.rows)
    assert len(rows) >= 4 and rows["trial_id"].is_unique
    # each trial takes its run's recorded seconds (80 s + 1 s setup), cut at the budget's end as live trials are
    # (their stage deadline), never more than 4 at a time
    assert np.allclose(rows["end_s"] - rows["start_s"], np.minimum(81.0, 400 - rows["start_s"]))
    assert rows["cut_at_stage_end"].sum() == 4 and rows["end_s"].max() == 400
    ev = sorted([(s, 1) for s in rows.start_s] + [(e, -1) for e in rows.end_s], key=lambda x: (x[0], x[1]))
    assert max(np.cumsum([d for _, d in ev])) == 4
    assert rows["start_s"].max() < 400  # suggested before the budget's end
    # no recorded run twice while the pool has unused ones; every suggestion mapped to the nearest unused one
    assert len({s["run_id"] for s in res.suggestions}) == len(res.suggestions)
    assert res.answer["valid_mrr"] == rows["valid_mrr"].max() and res.answer["test_mrr"] == pytest.approx(
        res.answer["valid_mrr"] - 0.01)
    assert [a[0] for a in res.anytime] == sorted(rows["end_s"])


def test_kgtuner_switches_at_half_the_budget_and_runs_stage2_on_the_expansions():
    table = _table()
    res = replay(_strategy("search=kgtuner", "search.top_k=2", "budget.seconds=600", "budget.trials=null"), table,
                 workers=2)
    rows = pd.DataFrame(res.rows)
    s1, s2 = rows[rows.stage == 1], rows[rows.stage == 2]
    assert len(s1) and len(s2) and set(s1.pool) == {"stage1"} and set(s2.pool) == {"expand"}
    assert s1["end_s"].max() <= 300 + 1e-9  # stage 1's trials end by its end (cut there if need be)
    assert s2["start_s"].min() >= 300 - 1e-9
    switched = [e for _, e in res.events if isinstance(e, events.StageSwitched)]
    assert len(switched) == 1 and len(switched[0].candidates) == 8
    # the first stage-2 trials are expansions of the stage-1 configurations it ranked top: no miss
    assert res.misses == 0 and res.answer["stage"] == 2


def test_a_stage2_candidate_outside_the_recorded_expansions_is_a_counted_miss():
    table = _table(expand_top=1)  # only the best stage-1 configuration has expansions
    strategy = _strategy("search=kgtuner", "search.top_k=3", "budget=trials", "budget.trials=30")
    res = replay(strategy, table, workers=1)
    assert res.misses > 0
    with pytest.raises(ConfigError, match="is not recorded"):
        replay(_strategy("search=kgtuner", "search.top_k=3", "budget=trials", "budget.trials=30"), table,
               workers=1, on_miss="fail")


def test_a_lost_miss_costs_its_seconds_and_gives_no_result_and_a_search_without_misses_is_unchanged():
    """on_miss=lose brackets the nearest mapping from below: the missed candidates fail (no validation, never the
    answer) after the stand-in's seconds; a search with no misses replays the same under both mappings."""
    table = _table(expand_top=1)
    args = ("search=kgtuner", "search.top_k=3", "budget=trials", "budget.trials=30")
    near = replay(_strategy(*args), table, workers=1)
    lost = replay(_strategy(*args), table, workers=1, on_miss="lose")
    # (not equal counts: a lost miss reports a failure where the nearest mapping reports its stand-in's value, so
    # the two searches' later suggestions differ)
    assert lost.misses > 0 and near.misses > 0
    rows = pd.DataFrame(lost.rows)
    failed = rows[(rows.stage == 2) & (rows.status == "failed")]
    assert len(failed) == lost.misses and failed["valid_mrr"].isna().all() and failed["run_id"].isna().all()
    # a lost miss borrows its stand-in's seconds, not the run: the stand-in stays free, and is no repeat
    borrowed = [s for s in lost.suggestions if s["stage"] == 2 and s["run_id"] is None]
    assert len(borrowed) == lost.misses and all(math.isnan(s["distance"]) for s in borrowed)
    used = [s["run_id"] for s in lost.suggestions if s["run_id"] is not None]
    assert lost.repeats == len(used) - len(set(used))  # repeats: runs used again, never a borrowed stand-in
    assert (failed["end_s"] - failed["start_s"]).min() > 0  # the seconds are spent
    assert lost.answer["trial_id"] not in set(failed["trial_id"]) and lost.answer["status"] == "ok"
    assert lost.answer["valid_mrr"] <= near.answer["valid_mrr"] + 1e-12
    full = _table()  # every stage-1 configuration a 30-trial search ranks in its top 3 has its expansions
    same = [replay(_strategy(*args), full, workers=1, on_miss=m) for m in ("nearest", "lose")]
    assert same[0].misses == 0 and same[0].rows == same[1].rows
    with pytest.raises(ConfigError, match="on_miss='maybe'"):
        replay(_strategy(*args), full, workers=1, on_miss="maybe")


def test_an_algorithm_with_settings_replays_that_setting_and_bad_settings_are_one_line():
    from kgtuner.bench.benchmark import (STUDIES, BenchmarkSettings, algorithm_label, parse_algorithm, run_cell,
                                         strategy_for)

    assert parse_algorithm("kgtuner[top_k=5, on_miss=lose]") == ("kgtuner", ["search.top_k=5"], "lose")
    assert parse_algorithm("rf_bore") == ("rf_bore", [], None)
    # one canonical label per algorithm: sorted keys, no spaces, the mapping of a two-stage search if not nearest
    assert algorithm_label("kgtuner [top_k=5, stage1_fraction=0.3]") == "kgtuner[stage1_fraction=0.3,top_k=5]"
    assert algorithm_label("kgtuner[]") == "kgtuner" and algorithm_label("kgtuner", "lose") == "kgtuner[on_miss=lose]"
    assert algorithm_label("random", "lose") == "random"
    with pytest.raises(ConfigError, match="twice"):
        BenchmarkSettings(algorithms=("kgtuner[top_k=5,gamma=0.2]", "kgtuner[gamma=0.2, top_k=5]"))
    table = _table()
    strategy = strategy_for("kgtuner[top_k=3,stage1_fraction=0.3]", table, 500.0, 0)
    assert strategy.settings.search["top_k"] == 3 and strategy.settings.search["stage1_fraction"] == 0.3
    row = run_cell(table, "kgtuner[top_k=3]", 2, 10.0, 0)
    assert row["algorithm"] == "kgtuner[top_k=3]" and row["trials_stage2"] > 0
    for bad, match in (("kgtuner[top_k]", "not key=value"), ("grash", "cannot be replayed"),
                       ("kgtuner[on_miss=maybe]", "choose among"), ("tpe[", "no brackets or commas inside"),
                       ("kgtuner[x=[1,2]]", "no brackets or commas inside"), ("nope[a=1]", "cannot be replayed")):
        with pytest.raises(ConfigError, match=match):
            parse_algorithm(bad)
    with pytest.raises(ConfigError, match=r"kgtuner\[no_such_key=1\].*conf/search/kgtuner.yaml"):
        strategy_for("kgtuner[no_such_key=1]", table, 500.0, 0)
    with pytest.raises(ConfigError, match="twice"):
        BenchmarkSettings(algorithms=("random", "random"))
    # the named grids: the issue's, and part 4's one-change-at-a-time variants of KGTuner at 8 workers
    assert STUDIES["main"].algorithms == ("kgtuner", "kgtuner_asha", "rf_bore", "tpe", "random")
    assert STUDIES["main"].workers == (1, 8) and STUDIES["main"].budgets == (10.0, 30.0, 100.0)
    assert min(s.seeds for s in STUDIES.values()) >= 30
    defaults = STUDIES["defaults"]
    assert defaults.workers == (8,) and defaults.algorithms[0] == "kgtuner"
    assert all(len(parse_algorithm(a)[1]) == 1 for a in defaults.algorithms[1:])


def test_asha_stops_trials_at_its_rungs_in_the_replay():
    table = _table(points=8)
    res = replay(_strategy("search=rf_bore", "search.early_stop=asha", "budget=trials", "budget.trials=24",
                           "trial.stage2.max_steps=800", "trial.stage2.valid_every=100"), table, workers=2)
    rows = pd.DataFrame(res.rows)
    stopped = rows[rows.status == "stopped"]
    assert len(stopped) > 0 and stopped["rung"].notna().all()
    # a stopped trial is charged up to its stop only
    assert (stopped["end_s"] - stopped["start_s"]).max() < 8 * 20.0


def test_the_same_seed_replays_the_same_search_and_seeds_differ():
    table = _table()

    def run(seed):
        res = replay(_strategy("search=rf_bore", "budget=trials", "budget.trials=12", f"seed={seed}"), table,
                     workers=3)
        return [s["run_id"] for s in res.suggestions]

    assert run(0) == run(0) and run(0) != run(1)


def _launch(run_dir, *overrides):
    return subprocess.run([sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={run_dir}",
                           "cluster.include_dashboard=false", *overrides], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.serial
@pytest.mark.slow
def test_a_live_kgtuner_search_and_its_replay_make_the_same_suggestions(tmp_path):
    """One worker, a trial budget: the live launcher on the demo, then the replay of the same strategy and seed
    on a table of what the live trials measured. Every suggestion (stage, trial_index, hyper-parameters) is the
    same, in the same order, and so is the answer."""
    overrides = ("cluster.num_cpus=1", "budget=trials", "budget.trials=10", "search.top_k=2",
                 "trial.stage1.max_steps=50", "trial.stage2.max_steps=50", "trial.stage2.valid_every=25")
    run_dir = tmp_path / "live"
    proc = _launch(run_dir, *overrides)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    live = pd.read_parquet(run_dir / "trials.parquet").sort_values("trial_index")
    table = ReplayTable.from_trials(run_dir, graph="demo")
    res = replay(_strategy(*overrides), table, workers=1)
    replayed = [(int(s["trial_index"]), int(s["stage"]), s["config"]) for s in res.suggestions]
    assert replayed == [(int(r.trial_index), int(r.stage), json.loads(r.config_json)) for r in live.itertuples()]
    assert res.misses == 0 and res.mean_distance == 0.0
    summary = json.loads((run_dir / "summary.json").read_text())
    best = live.set_index("trial_id").loc[summary["best"]["trial_id"]]
    assert res.answer["trial_index"] == int(best["trial_index"])


def test_a_cell_another_grid_replayed_on_the_same_table_is_copied_not_replayed_again(tmp_path, monkeypatch):
    import kgtuner.bench.benchmark as bench
    from kgtuner.bench.benchmark import BenchmarkSettings, run_benchmark

    table = _table()
    first = BenchmarkSettings(algorithms=("kgtuner", "random"), workers=(2,), budgets=(3.0,), seeds=2)
    rows = run_benchmark(table, first, tmp_path / "a" / "journal.jsonl")
    # a second grid holding two of the first's cells (kgtuner, seeds 0 and 1) and two of its own
    second = BenchmarkSettings(algorithms=("kgtuner", "kgtuner[top_k=2]"), workers=(2,), budgets=(3.0,), seeds=2)
    fresh = run_benchmark(table, second, tmp_path / "fresh" / "journal.jsonl")
    replayed, real = [], bench.run_cell
    monkeypatch.setattr(bench, "run_cell", lambda *a, **k: replayed.append(a[1:5]) or real(*a, **k))
    copied = run_benchmark(table, second, tmp_path / "b" / "journal.jsonl",
                           reuse=[tmp_path / "a" / "journal.jsonl", tmp_path / "b" / "journal.jsonl"])
    assert sorted(replayed) == [("kgtuner[top_k=2]", 2, 3.0, 0), ("kgtuner[top_k=2]", 2, 3.0, 1)]

    def same_search(r):
        return {k: v for k, v in r.items() if k not in ("wall_s", "searcher_s")}

    key = lambda r: (r["algorithm"], r["seed"])  # noqa: E731
    assert [same_search(r) for r in sorted(copied, key=key)] == [same_search(r) for r in sorted(fresh, key=key)]
    assert [r for r in copied if r["algorithm"] == "kgtuner"] == [r for r in rows if r["algorithm"] == "kgtuner"]
    # a journal of another budget unit (another table, or the table grown since) gives nothing to copy
    other = tmp_path / "c" / "journal.jsonl"
    lines = (tmp_path / "a" / "journal.jsonl").read_text().splitlines()
    other.parent.mkdir()
    other.write_text("\n".join([lines[0].replace('"mean_trial_s": ', '"mean_trial_s": 1'), *lines[1:]]) + "\n")
    replayed.clear()
    run_benchmark(table, second, tmp_path / "d" / "journal.jsonl", reuse=[other])
    assert len(replayed) == 4


@pytest.mark.parametrize("expand_top", [40, 10])  # every stage-1 configuration expanded (no miss), or the top 10
def test_a_two_stage_search_without_a_miss_is_copied_to_its_lost_miss_cell_one_with_a_miss_is_replayed(
        tmp_path, monkeypatch, expand_top):
    import kgtuner.bench.benchmark as bench
    from kgtuner.bench.benchmark import BenchmarkSettings, run_benchmark

    table = _table(expand_top=expand_top)
    grid = dict(workers=(2,), budgets=(3.0,), seeds=3)
    main = run_benchmark(table, BenchmarkSettings(algorithms=("kgtuner",), **grid), tmp_path / "main" / "journal.jsonl")
    bracket = BenchmarkSettings(algorithms=("kgtuner[on_miss=lose]",), **grid)
    fresh = run_benchmark(table, bracket, tmp_path / "fresh" / "journal.jsonl")
    replayed, real = [], bench.run_cell
    monkeypatch.setattr(bench, "run_cell", lambda *a, **k: replayed.append(a[4]) or real(*a, **k))
    copied = run_benchmark(table, bracket, tmp_path / "bracket" / "journal.jsonl",
                           reuse=[tmp_path / "main" / "journal.jsonl"])
    missed = sorted(r["seed"] for r in main if r["misses"] > 0)
    assert missed == ([] if expand_top == 40 else [0, 1, 2])  # both cases are what this test is about
    assert sorted(replayed) == missed  # a search that missed an expansion is replayed again: it may go elsewhere

    def same_search(r):
        return {k: v for k, v in r.items() if k not in ("wall_s", "searcher_s")}

    key = lambda r: r["seed"]  # noqa: E731
    assert [same_search(r) for r in sorted(copied, key=key)] == [same_search(r) for r in sorted(fresh, key=key)]
    assert {r["algorithm"] for r in copied} == {"kgtuner[on_miss=lose]"}


def test_a_replay_killed_while_writing_a_result_goes_on_where_it_stopped(tmp_path):
    """A kill in the middle of a journal line leaves a partial last line: the next run drops it, replays that cell
    again and appends after the last whole line (a result glued to the partial line would make the journal
    unreadable for good)."""
    from kgtuner.bench.benchmark import BenchmarkSettings, ResultsJournal, run_benchmark

    table = _table()
    journal = tmp_path / "journal.jsonl"
    settings = BenchmarkSettings(algorithms=("random",), workers=(1,), budgets=(3.0,), seeds=2)
    whole = run_benchmark(table, settings, journal)
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # the last result, cut short
    assert len(ResultsJournal(journal).read()[1]) == 1
    again = run_benchmark(table, settings, journal)
    assert sorted(r["seed"] for r in again) == [0, 1]
    assert ResultsJournal(journal).read()[1] == again and len(journal.read_text().splitlines()) == len(lines)
    assert {r["seed"]: r["test_mrr"] for r in again} == {r["seed"]: r["test_mrr"] for r in whole}
    # killed after the last result's text but before its newline: that line is cut too, and its cell replayed again
    journal.write_text("".join(lines).rstrip("\n"))
    replayed = []
    assert len(run_benchmark(table, settings, journal, progress=lambda i, n, row: replayed.append(row["seed"]))) == 2
    assert replayed == [1] and len(journal.read_text().splitlines()) == len(lines)
    assert len(ResultsJournal(journal).read()[1]) == 2


def test_a_search_without_a_full_graph_answer_has_empty_mrrs_and_scores_zero_in_every_figure():
    """KGTuner with its misses lost, on a table that expanded only the best stage-1 configuration: no stage-2 trial
    has a result, so its answer would be a stage-1 subgraph figure. The row keeps no MRR, and every comparison
    scores the search 0 (kgtuner.bench.compare.NO_ANSWER_MRR), never leaves it out of a pair."""
    from kgtuner.bench.benchmark import results_frame, run_cell
    from kgtuner.bench.compare import NO_ANSWER_MRR, cell_verdicts, format_summary, summarize

    table = _table(expand_top=1)
    rows = [run_cell(table, a, 2, 3.0, seed) for seed in range(3) for a in ("kgtuner[on_miss=lose]", "kgtuner")]
    lost = [r for r in rows if r["algorithm"] == "kgtuner[on_miss=lose]"]
    # the first stage-2 wave covers 2 configurations; where neither is the one expanded, no stage-2 trial has a result
    none = [r for r in lost if r["answer_stage"] == 1]
    assert len(none) >= 2 and all(r["misses"] > 0 for r in none)  # what this test is about
    assert all(r["valid_mrr"] is None and r["test_mrr"] is None for r in none)
    assert all(r["test_mrr"] is not None for r in lost if r["answer_stage"] == 2)
    # nor does its anytime curve ever hold one (stage 1's subgraph results are not an answer's, here or in stage 1)
    assert all(v is None and t is None for r in none for _, v, t, *_ in json.loads(r["anytime_json"]))
    assert any(t is not None for r in rows if r["algorithm"] == "kgtuner" for _, _, t, *_ in json.loads(r["anytime_json"]))
    assert all(r["test_mrr"] is not None for r in rows if r["algorithm"] == "kgtuner")
    df = results_frame(rows)
    summary = summarize(df).set_index("algorithm")
    assert summary.loc["kgtuner[on_miss=lose]", "no_answer"] == len(none) and summary.loc["kgtuner", "no_answer"] == 0
    scored = [NO_ANSWER_MRR if r["test_mrr"] is None else r["test_mrr"] for r in lost]
    assert NO_ANSWER_MRR == 0.0
    assert summary.loc["kgtuner[on_miss=lose]", "test_mrr"] == pytest.approx(np.mean(scored))
    assert summary.loc["kgtuner[on_miss=lose]", "diff"] == pytest.approx(np.mean(scored) - summary.loc["kgtuner", "test_mrr"])
    assert " none" in format_summary(summarize(df))
    # a grid of bracket replays alone (miss_bracket's own summary) is summarised too
    assert len(summarize(df[df.algorithm == "kgtuner[on_miss=lose]"])) == 1
    assert cell_verdicts(df).empty  # nothing but KGTuner's own two mappings: no rival to judge


def test_the_benchmark_grid_is_resumable_and_its_report_compares_paired_seeds(tmp_path):
    from kgtuner.bench.benchmark import BenchmarkSettings, results_frame, run_benchmark
    from kgtuner.bench.compare import format_summary, plot_anytime, subgraph_srcc, summarize, table_best_test

    table = _table()
    settings = BenchmarkSettings(workers=(1, 2), budgets=(3.0,), seeds=3)
    journal = tmp_path / "journal.jsonl"
    seen = []
    rows = run_benchmark(table, settings, journal, progress=lambda i, n, row: seen.append((i, n)))
    assert len(rows) == 5 * 2 * 3 and seen[-1] == (30, 30)
    # a restart replays nothing again; other settings are refused
    assert len(run_benchmark(table, settings, journal, progress=lambda *a: pytest.fail("replayed again"))) == 30
    with pytest.raises(ConfigError, match="recorded with other settings"):
        run_benchmark(table, BenchmarkSettings(workers=(1,), budgets=(3.0,), seeds=3), journal)
    df = results_frame(rows)
    assert {"graph", "algorithm", "workers", "budget_trials", "seed", "valid_mrr", "test_mrr"} <= set(df.columns)
    # budgets are compute in mean full-graph trials (81 s here): 3 trials' worth is 243 s on 1 worker, 121.5 on 2
    assert df.groupby("workers")["budget_s"].unique().map(list).to_dict() == {1: [243.0], 2: [121.5]}
    summary = summarize(df, table_best=table_best_test(table))
    assert len(summary) == 2 * 5
    ref = summary[summary.algorithm == "kgtuner"]
    assert ref["diff"].isna().all() and summary[summary.algorithm != "kgtuner"]["p"].between(0, 1).all()
    assert (summary["regret"] >= -1e-12).all()
    text = format_summary(summary)
    assert "kgtuner_asha" in text and "3 paired seeds" in text and " dist" in text and " srch%" in text
    assert ((summary["searcher_share"] > 0) & (summary["searcher_share"] < 1)).all()  # measured, not charged
    # the mapping's distance per searcher is reported (the live-vs-replay test checks 0 for an exact table)
    assert (summary["distance"] >= 0).all() and np.isfinite(summary["distance"]).all()
    # the miss bracket is reported beside KGTuner and paired with it, but not ranked among the competitors
    lost = run_benchmark(table, BenchmarkSettings(algorithms=("kgtuner",), workers=(1, 2), budgets=(3.0,), seeds=3,
                                                  on_miss="lose"), tmp_path / "lose.jsonl")
    assert {r["algorithm"] for r in lost} == {"kgtuner[on_miss=lose]"}
    both = summarize(results_frame(rows + lost), table_best=table_best_test(table))
    bracket = both[both.algorithm == "kgtuner[on_miss=lose]"]
    assert bracket["mean_rank"].isna().all() and bracket["p"].between(0, 1).all()
    ranked = both[both.algorithm != "kgtuner[on_miss=lose]"]
    assert np.allclose(ranked.groupby("workers")["mean_rank"].sum(), 1 + 2 + 3 + 4 + 5)
    assert "kgtuner[on_miss=lose]" in format_summary(both)
    # two replays of one cell that disagree (another table) are refused, never silently merged
    other = [{**r, "test_mrr": (r["test_mrr"] or 0) + 0.1} for r in rows[:1]]
    with pytest.raises(ConfigError, match="disagree"):
        results_frame(rows + other)
    plot_anytime(df, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0
    srcc = subgraph_srcc(table)
    assert len(srcc) == 4 and all(r["srcc"] > 0.9 for r in srcc)  # the synthetic truth ranks alike on both graphs
    # its bootstrap interval holds the estimate and, on 10 configurations ranked alike, excludes no correlation
    eps = 1e-12  # the estimate and a resample of perfectly ranked pairs differ by rounding
    assert all(0.0 < r["ci_low"] <= r["srcc"] + eps and r["srcc"] <= r["ci_high"] + eps <= 1.0 + eps for r in srcc)
    assert subgraph_srcc(table) == srcc  # the resamples are seeded: the page shows the same interval every time


def test_the_replay_command_writes_results_a_summary_and_curves(tmp_path):
    """`kgtuner bench replay` on the committed demo table, then `kgtuner bench compare` of its results."""
    out = tmp_path / "replay"
    kgtuner = str(Path(sys.executable).with_name("kgtuner"))  # the console script a user runs
    base = [kgtuner, "bench", "replay", "--table", str(REPO / "docs/benchmarks/tables/demo"), "--out", str(out)]
    cmd = [*base, "--algorithms", "random", "rf_bore", "--workers", "1", "2", "--budgets", "3", "--seeds", "2"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "8/8" in proc.stdout and "test MRR" in proc.stdout
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 2 * 2 * 2 and set(df["algorithm"]) == {"random", "rf_bore"}
    assert {"graph", "algorithm", "workers", "budget_trials", "seed", "valid_mrr", "test_mrr"} <= set(df.columns)
    assert (out / "curves_demo.png").stat().st_size > 0 and "2 paired seeds" in (out / "summary.txt").read_text()
    proc = subprocess.run([kgtuner, "bench", "compare", "--results", str(out), "--tables",
                           str(REPO / "docs/benchmarks/tables/demo")], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "SRCC of subgraph and full-graph" in proc.stdout, proc.stderr[-3000:]
    # compare --out: every search of the folders in one results.parquet, beside the summary
    proc = subprocess.run([kgtuner, "bench", "compare", "--results", str(out), str(out / "journal.jsonl"),
                           "--out", str(tmp_path / "all")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    combined = pd.read_parquet(tmp_path / "all" / "results.parquet")
    assert len(combined) == len(df)  # the same folder twice: each search once
    assert {"graph", "algorithm", "workers", "budget_trials", "seed", "valid_mrr", "test_mrr"} <= set(combined.columns)
    assert (tmp_path / "all" / "summary.txt").is_file()
    bad = subprocess.run([*base, "--algorithms", "grash"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "grash" in bad.stderr and "Traceback" not in bad.stderr
    bad = subprocess.run([*base, "--study", "defaults", "--seeds", "3"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "--study defaults fixes the grid; drop --seeds" in bad.stderr


def test_a_trial_cut_before_its_runs_best_validation_reports_that_validation_as_its_test():
    """The table holds test metrics at a run's best validation only: a trial that ends earlier (the budget's end)
    must not be credited with them."""
    table = _table(points=4)
    res = replay(_strategy("search=random", "budget.seconds=100", "budget.trials=null"), table, workers=2)
    cut = [r for r in res.rows if r["cut_at_stage_end"]]
    assert cut and all(r["test_is_valid_proxy"] and r["test_mrr"] == r["valid_mrr"] for r in cut)
    whole = [r for r in res.rows if not r["cut_at_stage_end"]]
    assert whole and all(not r["test_is_valid_proxy"] and r["test_mrr"] == pytest.approx(r["valid_mrr"] - 0.01)
                         for r in whole)


def test_the_defaults_rule_changes_a_default_only_where_the_confirming_graph_agrees():
    """Part 4's rule (kgtuner.bench.compare.variant_verdicts / decide_defaults, fixed before the runs)."""
    from kgtuner.bench.compare import decide_defaults, variant_verdicts

    rng = np.random.default_rng(0)
    effects = {"codex-m": {"kgtuner[top_k=5]": 0.02, "kgtuner[top_k=20]": 0.01, "kgtuner[stage1_fraction=0.3]": 0.02,
                           "kgtuner[stage2_start=ordered]": -0.02, "kgtuner[searcher.batch=none]": 0.0},
               "wn18rr": {"kgtuner[top_k=5]": 0.02, "kgtuner[top_k=20]": 0.02, "kgtuner[stage1_fraction=0.3]": 0.0,
                          "kgtuner[stage2_start=ordered]": -0.02, "kgtuner[searcher.batch=none]": 0.0}}
    rows = []
    for graph, eff in effects.items():
        for budget in (10.0, 30.0, 100.0):
            for seed in range(30):
                base = 0.3 + rng.normal(0, 0.02)
                rows.append({"graph": graph, "workers": 8, "budget_trials": budget, "seed": seed,
                             "algorithm": "kgtuner", "test_mrr": base})
                for variant, e in eff.items():
                    rows.append({"graph": graph, "workers": 8, "budget_trials": budget, "seed": seed,
                                 "algorithm": variant,  # noise that cancels over the seeds: no effect is none
                                 "test_mrr": base + e + (0.005 if seed % 2 else -0.005) * (1 + seed % 3)})
    verdicts = variant_verdicts(pd.DataFrame(rows))
    v = verdicts.set_index(["graph", "variant"])["verdict"]
    assert v["codex-m", "kgtuner[top_k=5]"] == "wins" and v["codex-m", "kgtuner[stage2_start=ordered]"] == "loses"
    assert v["wn18rr", "kgtuner[stage1_fraction=0.3]"] == "no difference"
    assert (verdicts["pairs"] == 90).all() and (verdicts["seeds"] == 30).all()
    decided = {r["variant"]: r for r in decide_defaults(verdicts)}
    # wins on both graphs; of top_k's two winners the larger codex-m gain is kept
    assert decided["kgtuner[top_k=5]"]["change"] and not decided["kgtuner[top_k=20]"]["change"]
    assert decided["kgtuner[top_k=20]"]["decide"] == decided["kgtuner[top_k=20]"]["confirm"] == "wins"
    # wins on codex-m only: WN18RR does not confirm it
    assert decided["kgtuner[stage1_fraction=0.3]"]["decide"] == "wins"
    assert not decided["kgtuner[stage1_fraction=0.3]"]["change"]
    assert not decided["kgtuner[stage2_start=ordered]"]["change"]
    assert not decided["kgtuner[searcher.batch=none]"]["change"]
    # a defaults grid whose default itself is not replayed yet decides nothing, and says so without failing
    none = variant_verdicts(pd.DataFrame([r for r in rows if r["algorithm"] != "kgtuner"]))
    assert none.empty and {"graph", "variant", "verdict"} <= set(none.columns) and decide_defaults(none) == []
