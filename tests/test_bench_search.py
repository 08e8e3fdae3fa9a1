"""The search benchmark's bookkeeping (scripts/bench_search.py): curves, ranks, time to reach, cell plans."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_search", REPO / "scripts" / "bench_search.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
