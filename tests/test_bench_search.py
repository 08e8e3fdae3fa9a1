"""The search benchmark's bookkeeping (scripts/bench_search.py): curves, ranks, time to reach, cell plans."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from script_loader import load_script

REPO = Path(__file__).resolve().parents[1]




@pytest.fixture(scope="module")
def bench():
    return load_script("bench_search")


def _trials(rows):
    cols = ["stage", "status", "valid_mrr", "end_s", "rung"]
    return pd.DataFrame(rows, columns=cols)


def test_curve_counts_only_answer_eligible_trials(bench):
    trials = _trials([
        (1, "ok", 0.99, 1.0, None),       # stage 1: subgraph MRR, not comparable
        (2, "ok", 0.40, 6.0, None),
        (2, "failed", None, 7.0, None),
        (2, "stopped", 0.90, 8.0, 100.0),  # stopped early by ASHA: never an answer
        (2, "ok", 0.35, 9.0, None),        # worse: no new point
        (2, "stopped", 0.55, 10.0, None),  # stopped by the budget: counts
    ])
    pts = bench.curve_points(trials, stage=2)
    assert pts["t"].tolist() == [6.0, 10.0]
    assert pts["best_valid_mrr"].tolist() == [0.40, 0.55]


def test_final_stage_per_search(bench):
    t = _trials([(1, "ok", 0.1, 1.0, None), (3, "ok", 0.2, 2.0, None)])
    assert bench.final_stage({"search": "kgtuner", "two_stage": True}, t) == 2
    assert bench.final_stage({"search": "random", "two_stage": False}, t) == 1
    assert bench.final_stage({"search": "grash", "rounds": [{}, {}, {}, {}]}, t) == 4
    assert bench.final_stage({"search": "grash"}, t) == 3


def _results(values):
    rows = []
    for (dataset, seed), per_algo in values.items():
        for algo, v in per_algo.items():
            rows.append(dict(dataset=dataset, model="complex", algorithm=algo, seed=seed, budget_s=10.0,
                             valid_mrr=v, test_mrr=v, trials=3, error=None))
    return pd.DataFrame(rows)


def test_mean_ranks_ties_missing_and_incomplete_blocks(bench):
    res = _results({
        ("a", 0): {"x": 0.5, "y": 0.4, "z": 0.4},
        ("a", 1): {"x": np.nan, "y": 0.4, "z": 0.3},   # x failed: ranks last
        ("b", 0): {"x": 0.9, "y": 0.1},                # z missing: block left out
    })
    ranks = bench.mean_ranks(res, "valid_mrr")
    assert ranks["x"] == pytest.approx((1 + 3) / 2)
    assert ranks["y"] == pytest.approx((2.5 + 1) / 2)
    assert ranks["z"] == pytest.approx((2.5 + 2) / 2)


def test_time_to_reach_reference(bench):
    res = _results({("a", 0): {"random": 0.5, "kgtuner": 0.6, "tpe": 0.45}})
    curves = pd.DataFrame([
        ("a", "complex", "random", 0, 2.0, 0.3), ("a", "complex", "random", 0, 8.0, 0.5),
        ("a", "complex", "kgtuner", 0, 5.0, 0.55), ("a", "complex", "kgtuner", 0, 9.0, 0.6),
        ("a", "complex", "tpe", 0, 1.0, 0.45),
    ], columns=["dataset", "model", "algorithm", "seed", "t", "best_valid_mrr"])
    reach = bench.time_to_reach(curves, res).set_index("algorithm")
    assert reach.loc["random", "t_reach"] == 8.0 and reach.loc["random", "frac_budget"] == pytest.approx(0.8)
    assert reach.loc["kgtuner", "t_reach"] == 5.0
    assert np.isnan(reach.loc["tpe", "t_reach"])


def test_mean_curve_waits_for_every_seed(bench):
    curves = pd.DataFrame([(0, 1.0, 0.2), (0, 3.0, 0.4), (1, 2.0, 0.6)], columns=["seed", "t", "best_valid_mrr"])
    y, n = bench.mean_curve(curves, np.array([0.5, 1.5, 2.5, 3.5]))
    assert n == 2
    assert np.isnan(y[0]) and np.isnan(y[1])
    assert y[2] == pytest.approx(0.4) and y[3] == pytest.approx(0.5)


def test_plan_skips_finished_cells_and_checks_inputs(bench, tmp_path):
    data = tmp_path / "data"
    (data / "tiny").mkdir(parents=True)
    out = tmp_path / "out"
    cells = bench.plan_cells(["tiny"], ["complex"], ["kgtuner", "random"], [0, 1], out, data, 0.5)
    assert len(cells) == 4
    done = Path(cells[0]["run_dir"])
    done.mkdir(parents=True)
    (done / "cell.json").write_text(json.dumps({"error": None}))
    failed = Path(cells[1]["run_dir"])
    failed.mkdir(parents=True)
    (failed / "cell.json").write_text(json.dumps({"error": "RayTaskError: boom"}))  # runs again
    again = bench.plan_cells(["tiny"], ["complex"], ["kgtuner", "random"], [0, 1], out, data, 0.5)
    assert len(again) == 3 and all(c["run_dir"] != str(done) for c in again)
    assert "budget.seconds=30" in cells[0]["overrides"]  # 60 s default x 0.5
    with pytest.raises(SystemExit, match="unknown algorithm"):
        bench.plan_cells(["tiny"], ["complex"], ["hyperband"], [0], out, data, 1.0)
    with pytest.raises(SystemExit, match="not found"):
        bench.plan_cells(["nope"], ["complex"], ["random"], [0], out, data, 1.0)


def test_every_algorithm_composes_to_valid_settings(bench, tmp_path):
    """Each algorithm's overrides compose with the launcher's config and validate (no Ray)."""
    from hydra import compose, initialize_config_dir

    from kgtuner.paths import CONF_DIR
    from kgtuner.tune.settings import ExperimentSettings

    (tmp_path / "tiny").mkdir()
    for algo in bench.ALGORITHMS:
        overrides = bench.cell_overrides("tiny", "complex", algo, 0, 20.0, tmp_path)
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        s = ExperimentSettings.from_config(cfg)
        assert s.budget.seconds == 20.0 and s.model_name == "complex"


def test_large_suite_cells_run_two_trials_in_flight_with_per_dataset_controls(bench, tmp_path):
    """The large suite (issue 17): its budgets, 2 CPUs per search, per-dataset full-graph steps, one cell at a time."""
    from hydra import compose, initialize_config_dir

    from kgtuner.paths import CONF_DIR
    from kgtuner.tune.settings import ExperimentSettings

    suite = bench.SUITES["large"]
    assert suite["jobs"] == 1
    for name in ("codex-m", "wn18rr"):
        (tmp_path / name).mkdir()
    cells = bench.plan_cells(["codex-m", "wn18rr"], ["complex"], ["kgtuner", "random"], [0], tmp_path / "out",
                             tmp_path, 1.0, suite)
    by = {(c["dataset"], c["algorithm"]): c for c in cells}
    assert by["codex-m", "kgtuner"]["budget_s"] == bench.LARGE_BUDGETS["codex-m"]
    assert by["wn18rr", "random"]["budget_s"] == bench.LARGE_BUDGETS["wn18rr"]
    for (dataset, _), cell in by.items():
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=cell["overrides"])
        s = ExperimentSettings.from_config(cfg)
        assert cfg.cluster.num_cpus == 2
        assert cfg.trial.stage2.max_steps == bench.LARGE_STAGE2_STEPS[dataset]
        assert s.budget.seconds == bench.LARGE_BUDGETS[dataset]
    # the main suite keeps its one-core cells
    main = bench.cell_overrides("codex-m", "complex", "random", 0, 20.0, tmp_path)
    assert "cluster.num_cpus=1" in main and "trial.stage2.max_steps=300" in main


@pytest.fixture(scope="module")
def page():
    return load_script("benchmarks_page")


def test_page_keeps_the_small_graph_sections_of_the_previous_page(page, tmp_path):
    old = tmp_path / "old.md"
    old.write_text("# Benchmarks\n\nintro\n\n> note by hand\n\n## Search efficiency (paper Figure 7, on a CPU)\n\nT1\n"
                   "\n## Ablations (paper Section 6.3)\n\nT2\n")
    kept = page.kept_small_sections(old)
    assert kept[0] == page.KEPT_NOTE and "intro" not in kept and "> note by hand" not in kept
    assert "## Search efficiency on small graphs, 1 trial at a time (paper Figure 7, on a CPU)" in kept
    assert kept[-1] == "T2"
    regenerated = tmp_path / "new.md"
    regenerated.write_text("\n".join(["# Benchmarks", "", "## Large", "", page.SMALL_HEADING + " (x)", "", *kept]))
    assert page.kept_small_sections(regenerated) == kept  # idempotent
    assert page.kept_small_sections(tmp_path / "missing.md") == []


def test_page_regenerated_without_the_live_outputs_keeps_their_sections_after_the_replay(page, tmp_path):
    """scripts/replay_benchmark.sh regenerates the page where the live suite's outputs are not: the live large-graph
    sections and the small-graph ones stay as committed, and the replay section goes first."""
    old = tmp_path / "benchmarks.md"
    large = [page.LARGE_HEADING + ", 2 trials in flight (x)", "", "L1", "", "### sub", "L2", ""]
    old.write_text("\n".join(["# Benchmarks", "", "intro", "", *large, page.SMALL_HEADING + " (y)", "",
                              "## Ablations (paper Section 6.3)", "", "T2", ""]))
    assert page.kept_large_sections(old) == large and page.kept_large_sections(tmp_path / "none.md") == []
    before = old.read_text()
    assert page.main(["--page", str(old), "--large", str(tmp_path / "no_large"), "--main", str(tmp_path / "no_main"),
                      "--replay", str(tmp_path / "no_replay"), "--tables", str(tmp_path / "no_tables")]) == 0
    after = old.read_text()
    assert "\n".join(large) in after and "T2" in after
    assert after.index("L1") < after.index(page.SMALL_HEADING) and before.count("L2") == after.count("L2") == 1


def test_stage_trace_reads_each_kgtuner_search(page, tmp_path):
    run = tmp_path / "cells" / "codex-m__complex__kgtuner__s0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"budget": {"seconds": 100.0, "switch_wait_s": 2.5},
                                                  "stage2_started_s": 52.0, "best": {"from_subgraph": False}}))
    pd.DataFrame({"stage": [1, 1, 1, 2, 2], "status": ["ok", "ok", "failed", "ok", "stopped"],
                  "valid_mrr": [0.2, 0.3, np.nan, 0.25, 0.1]}).to_parquet(run / "trials.parquet")
    other = tmp_path / "cells" / "codex-m__complex__random__s0"  # not a KGTuner search
    other.mkdir()
    trace = page.stage_trace(tmp_path)
    assert len(trace) == 1
    row = trace.iloc[0]
    assert (row.stage1_trials, row.stage2_trials, row.stage2_finished) == (3, 2, 1)
    assert row.stage2_start == pytest.approx(0.52) and row.switch_wait_s == 2.5
    assert row.best_stage1 == pytest.approx(0.3) and row.best_stage2 == pytest.approx(0.25)
    assert "| codex-m / kgtuner | 3.0 | 2.0 (1.0) | 0.52 B | 2.5 s | 0.300 | 0.250 | 0 of 1 |" in \
        page.section_stage_trace(tmp_path)


def test_large_findings_state_time_to_reach_and_rf_bore_ties(page, bench):
    keys = dict(dataset="g", model="complex")
    results = pd.DataFrame([
        {**keys, "algorithm": "kgtuner", "seed": 0, "valid_mrr": 0.30, "budget_s": 100.0, "final_trials": 4},
        {**keys, "algorithm": "random", "seed": 0, "valid_mrr": 0.20, "budget_s": 100.0, "final_trials": 16},
        {**keys, "algorithm": "rf_bore", "seed": 0, "valid_mrr": 0.20, "budget_s": 100.0, "final_trials": 14},
    ])
    curves = pd.DataFrame([
        {**keys, "algorithm": "kgtuner", "seed": 0, "t": 60.0, "best_valid_mrr": 0.10},
        {**keys, "algorithm": "kgtuner", "seed": 0, "t": 70.0, "best_valid_mrr": 0.25},
        {**keys, "algorithm": "random", "seed": 0, "t": 80.0, "best_valid_mrr": 0.20},
        {**keys, "algorithm": "rf_bore", "seed": 0, "t": 80.0, "best_valid_mrr": 0.20},
    ])
    text = "\n".join(page.large_findings(results, curves, bench))
    assert "KGTuner reached it in 1 of 1 searches, at 0.70 B (median)" in text
    assert "0.20 B into its stage 2, i.e. within 40% of stage 2's half" in text
    assert "runs 14.0 full-graph trials, so only about 4 are chosen by the forest. In 1 of 1 blocks" in text


def test_the_replay_section_comes_from_the_results_journal_and_the_table(page, tmp_path):
    """docs/benchmarks.md's replay section (issue 22): built from a `kgtuner bench replay` journal and its recorded
    table; absent when no replay was run."""
    import shutil

    from kgtuner.bench.benchmark import BenchmarkSettings, run_benchmark
    from kgtuner.bench.replay import ReplayTable

    docs = tmp_path / "benchmarks"
    docs.mkdir()
    assert page.section_replay(tmp_path / "none", tmp_path / "tables", docs, "benchmarks") == []
    tables = tmp_path / "tables"
    shutil.copytree(REPO / "docs/benchmarks/tables/demo", tables / "demo")
    run_benchmark(ReplayTable.load(tables / "demo"), BenchmarkSettings(algorithms=("kgtuner", "random"), workers=(1,),
                                                                       budgets=(2.0,), seeds=2),
                  tmp_path / "replay" / "demo" / "main" / "journal.jsonl")
    run_benchmark(ReplayTable.load(tables / "demo"), BenchmarkSettings(algorithms=("kgtuner", "kgtuner[top_k=2]"),
                                                                       workers=(1,), budgets=(2.0,), seeds=2),
                  tmp_path / "replay" / "demo" / "defaults" / "journal.jsonl")
    md = "\n".join(page.section_replay(tmp_path / "replay", tables, docs, "benchmarks"))
    assert "### demo" in md and "4 replayed searches" in md and "2 paired seeds" in md and "vs kgtuner" in md
    assert "#### KGTuner's defaults at 8 workers" in md and "kgtuner[top_k=2]" in md
    # part 4's decision table, by the fixed rule: its graphs (codex-m, then WN18RR) were not replayed here
    assert "### KGTuner's defaults: the decisions" in md and "| `kgtuner[top_k=2]` | demo | 2 |" in md
    assert "| `kgtuner[top_k=2]` | not run | not run | no |" in md
    assert (docs / "replay_demo_main_curves.png").stat().st_size > 0 and "replay_demo_main_curves.png" in md
    # every search once in results.parquet: kgtuner's cells are in both grids (a replay is deterministic)
    df = pd.read_parquet(tmp_path / "replay" / "results.parquet")
    assert len(df) == 6 and sorted(df["algorithm"].unique()) == ["kgtuner", "kgtuner[top_k=2]", "random"]
    assert {"graph", "algorithm", "workers", "budget_trials", "seed", "valid_mrr", "test_mrr"} <= set(df.columns)
    assert "Spearman: batch 256 dim 200" in md
