"""Fast unit tests of the coordinator's pieces: budget clock, settings validation, results, resources."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from tune_helpers import FakeTimer, experiment_config

from kgtuner.errors import ConfigError
from kgtuner.tune.budget import Budget, BudgetClock
from kgtuner.tune.plots import best_so_far, plot_search_curve
from kgtuner.cluster.resources import plan_resources
from kgtuner.tune.results import ResultsStore, make_row, rows_to_frame, summary_table
from kgtuner.tune.settings import ExperimentSettings, TrialSettings


def test_clock_counts_offset_plus_session_time():
    timer = FakeTimer(100.0)
    clock = BudgetClock(offset=30.0, timer=timer)
    assert clock.elapsed() == pytest.approx(30.0)
    timer.t += 12.5
    assert clock.elapsed() == pytest.approx(42.5)
    with pytest.raises(ValueError):
        BudgetClock(offset=-1)


def test_clock_unix_time_of_a_future_elapsed_second():
    clock = BudgetClock(offset=10.0)
    import time

    assert clock.unix_time_at(20.0) == pytest.approx(time.time() + 10.0, abs=0.5)
    assert math.isinf(clock.unix_time_at(math.inf))


def test_budget_windows_seconds_and_trials():
    b = Budget(seconds=100)
    assert b.stage_window(1, 2) == (0.0, 50.0)
    assert b.stage_window(2, 2) == (50.0, 100.0)
    assert b.stage_window(1, 1) == (0.0, 100.0)
    assert b.grace_s == pytest.approx(5.0)
    assert b.stage_trials(1, 2) is None
    t = Budget(trials=9)
    assert (t.stage_trials(1, 2), t.stage_trials(2, 2), t.stage_trials(1, 1)) == (4, 5, 9)
    assert math.isinf(t.stage_window(2, 2)[1])


@pytest.mark.parametrize("kwargs, fragment", [
    ({"seconds": 0}, "budget.seconds"),
    ({"seconds": -5}, "budget.seconds"),
    ({"seconds": None, "trials": None}, "exactly one"),
    ({"seconds": 10, "trials": 3}, "exactly one"),
    ({"trials": 0, "seconds": None}, "budget.trials"),
    ({"seconds": 10, "stage1_fraction": 1.0}, "stage1_fraction"),
    ({"seconds": 10, "stage1_fraction": 0.0}, "stage1_fraction"),
    ({"seconds": 10, "grace_fraction": 1.0}, "grace_fraction"),
])
def test_budget_rejects_bad_values(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        Budget(**kwargs)


def _cfg(**over):
    return experiment_config(8, **over)


def test_settings_accepts_the_defaults():
    s = ExperimentSettings.from_config(_cfg())
    assert s.two_stage and s.budget.seconds == 60 and s.trial.cpus is None and s.options.top_k == 10
    assert not ExperimentSettings.from_config(_cfg(search={"name": "random"})).two_stage


@pytest.mark.parametrize("key, value, fragment", [
    ("search.subgraph_ratio", 1.5, "search.subgraph_ratio"),
    ("search.subgraph_ratio", 0.0, "search.subgraph_ratio"),
    ("search.subgraph_sampler", "bfs", "search.subgraph_sampler"),
    ("search.stage1_fraction", 1.0, "search.stage1_fraction"),
    ("search.top_k", 0, "search.top_k"),
    ("budget.seconds", -1, "budget.seconds"),
    ("trial.gpus", -1, "trial.gpus"),
    ("trial.cpus", 0, "trial.cpus"),
    ("trial.stage1.max_steps", 0, "trial.stage1.max_steps"),
    ("trial.stage1.max_valid_triples", 0, "trial.stage1.max_valid_triples"),
    ("trial.stage2.max_valid_triples", "all", "trial.stage2.max_valid_triples"),
    ("final.seeds", -2, "final.seeds"),
    ("cluster.num_gpus", -8, "cluster.num_gpus"),
    ("trial.inject_failures", ["x"], "inject_failures"),
])
def test_settings_rejects_bad_values_naming_the_key(key, value, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        ExperimentSettings.from_config(_cfg(**{key: value}))


def test_settings_rejects_unknown_budget_key():
    cfg = _cfg()
    cfg["budget"]["secs"] = 3
    with pytest.raises(ConfigError, match="secs"):
        ExperimentSettings.from_config(cfg)


def _trial(**kw) -> TrialSettings:
    base = {"stage1": {"max_steps": 1, "valid_every": 1, "patience": 1},
            "stage2": {"max_steps": 1, "valid_every": 1, "patience": 1}}
    base.update(kw)
    return TrialSettings.from_mapping(base)


def test_resources_logical_gpus_share_cpus():
    plan = plan_resources(_trial(gpus=1), num_gpus=8, num_cpus=2)
    assert plan.slots == 8 and plan.resources == {"gpu": 1, "cpu": 0.25} and not plan.notes


def test_resources_fall_back_to_cpu_slots_and_say_so():
    plan = plan_resources(_trial(gpus=1), num_gpus=0, num_cpus=4)
    assert plan.slots == 4 and plan.resources == {"cpu": 1.0}
    assert any("no GPUs" in n for n in plan.notes)
    plan = plan_resources(_trial(gpus=1, cpus=2), num_gpus=0, num_cpus=4)
    assert plan.slots == 2


def _row(tid, stage, mrr, status="ok", end=1.0, **hp):
    cfg = {"lr": 0.01, "dim": 100, "batch_size": 128, "negatives": 128, **hp}
    return make_row(tid, stage, cfg, status=status, valid=None if mrr is None else {"mrr": mrr, "hits@1": mrr / 2},
                    test=None, error="boom" if status == "failed" else None, start_s=0.0, end_s=end, node="n",
                    gpu="0", steps=10, trial_index=int(tid[1:]))


def test_results_store_roundtrip_top_k_and_mixed_types(tmp_path):
    store = ResultsStore(tmp_path)
    store.add(_row("t0", 1, 0.30, end=1))
    store.add(_row("t1", 1, 0.50, end=2, lr=0.02))
    store.add(_row("t2", 1, None, status="failed", end=3, negatives="1VsAll"))
    store.add(_row("t3", 1, 0.40, status="stopped", end=4, lr=0.03))
    store.add(_row("t4", 1, 0.50, end=5, lr=0.02))  # same config as t1: deduplicated in top-k
    frame = pd.read_parquet(tmp_path / "trials.parquet")
    assert list(frame["trial_id"]) == ["t0", "t1", "t2", "t3", "t4"]
    for col in ("trial_id", "stage", "lr", "dim", "valid_mrr", "valid_hits@10", "test_mrr", "status", "error",
                "start_s", "end_s", "node", "gpu"):
        assert col in frame.columns
    assert set(frame["negatives"]) == {"128", "1VsAll"}  # int/str column stored as strings
    top = store.top_configs(1, 2)
    assert [c["lr"] for c in top] == [0.02, 0.03]
    assert isinstance(top[0]["negatives"], int)  # exact types come back from config_json
    again = ResultsStore.load(tmp_path)
    assert len(again) == 5 and again.best(1)["valid_mrr"] == 0.5
    assert again.top_configs(1, 2) == top
    again.add(_row("t0", 1, 0.35))  # replacing a row never duplicates it
    assert len(again) == 5
    assert store.counts() == {"1": {"ok": 3, "failed": 1, "stopped": 1}}


def test_summary_table_and_plot(tmp_path):
    store = ResultsStore(tmp_path)
    store.add(_row("t0", 1, 0.3, end=10), flush=False)
    store.add(_row("t1", 2, 0.6, end=70), flush=False)
    store.add(_row("t2", 2, None, status="failed", end=80), flush=False)
    text = summary_table(store, {"search": "kgtuner", "dataset": "demo", "model": "complex",
                                 "budget": {"seconds": 100, "used_s": 99.0},
                                 "best": {"trial_id": "t1", "stage": 2, "valid": {"mrr": 0.6}, "test": None,
                                          "config": {"lr": 0.01}}})
    assert "t1" in text and "stage 2: 2 trials" in text and "0.6000" in text
    path = plot_search_curve(store.rows(), tmp_path / "curve.png", switch_s=50, budget_s=100)
    assert path.stat().st_size > 1000


def test_best_so_far_skips_nan_and_sorts():
    x, y = best_so_far(np.array([3.0, 1.0, 2.0, np.nan]), np.array([0.2, 0.1, np.nan, 0.9]))
    assert list(x) == [1.0, 3.0] and list(y) == [0.1, 0.2]


def test_trial_report_round_trips_and_scores():
    from kgtuner.search.base import EARLY_STOP_RUNG, EARLY_STOPPED
    from kgtuner.tune.report import TrialReport

    final = TrialReport(stage=2, step=40, valid={"mrr": 0.5, "hits@1": 0.25}, graph="demo", node="n", gpu="0",
                        done=True, status="stopped", test={"mrr": 0.4}, started_unix=1.0, ended_unix=2.0,
                        timing={"fit_s": 0.5})
    flat = final.to_dict()
    assert flat["valid_mrr"] == 0.5 and flat["trial_status"] == "stopped" and flat["test_mrr"] == 0.4
    assert flat["fit_s"] == 0.5 and math.isnan(flat["valid_hits@10"]) and flat["error"] == ""
    back = TrialReport.from_dict({**flat, "time_this_iter_s": 3.0})  # Tune's own keys are ignored
    assert back == final.replace(error=None) and back.score() == 0.5
    assert TrialReport.from_dict({"valid_mrr": 0.9, "trial_status": "failed"}).score() is None
    assert TrialReport.from_dict({"valid_mrr": float("nan")}).score() is None
    assert TrialReport.from_dict(None).score() is None
    early = TrialReport(valid={"mrr": 0.3}, early_stop_rung=25).to_dict()
    assert early[EARLY_STOPPED] is True and early[EARLY_STOP_RUNG] == 25
    assert TrialReport.from_dict(early).early_stop_rung == 25


def test_rows_to_frame_has_documented_column_order():
    frame = rows_to_frame([_row("t0", 1, 0.1)])
    cols = list(frame.columns)
    assert cols[:2] == ["trial_id", "stage"] and cols.index("lr") < cols.index("valid_mrr")
    assert json.loads(frame["config_json"][0])["dim"] == 100


def test_split_config_and_metric_shapes():
    from kgtuner.tune.report import split_config
    from kgtuner.tune.trainable import metric_dict

    hp, meta = split_config({"lr": 0.1, "dim": 100, "stage": 2, "trial_index": 7})
    assert hp == {"lr": 0.1, "dim": 100} and meta == {"stage": 2, "trial_index": 7}
    flat = {"step": 5, "valid_mrr": 0.5, "valid_hits@1": 0.25, "best_valid_mrr": 0.6}
    assert metric_dict(flat, "valid") == {"mrr": 0.5, "hits@1": 0.25}
    assert metric_dict({"valid": {"mrr": 0.3, "hits@10": 0.9}}, "valid") == {"mrr": 0.3, "hits@10": 0.9}
    assert metric_dict({"step": 1}, "test") is None


def test_run_dir_guards_resume_and_reuse(tmp_path):
    from kgtuner.tune.coordinator import STATE_FILE, check_run_dir, fingerprint

    fresh = ExperimentSettings.from_config(_cfg())
    assert check_run_dir(fresh, tmp_path) is None
    (tmp_path / STATE_FILE).write_text(json.dumps({"stage": 1, "elapsed_s": 12.0,
                                                   "fingerprint": fingerprint(fresh)}))
    with pytest.raises(ConfigError, match="resume=true"):
        check_run_dir(fresh, tmp_path)  # an existing experiment is never overwritten
    resumed = ExperimentSettings.from_config({**_cfg(), "resume": True})
    assert check_run_dir(resumed, tmp_path)["elapsed_s"] == 12.0
    changed = ExperimentSettings.from_config({**_cfg(**{"budget.seconds": 30}), "resume": True})
    with pytest.raises(ConfigError, match="budget"):
        check_run_dir(changed, tmp_path)


def test_an_answer_from_the_subgraph_is_flagged_loudly(tmp_path):
    """Stage 2 produced no successful trial: the answer is a stage-1 trial, and summary.json, the
    summary table and the log say that its metrics were measured on the subgraph."""
    import io

    from hydra import compose, initialize_config_dir

    from kgtuner.paths import CONF_DIR
    from kgtuner.tune.coordinator import Coordinator
    from kgtuner.tune.strategies.kgtuner import SUBGRAPH_ANSWER_WARNING

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        settings = ExperimentSettings.from_config(compose(config_name="config"))
    out = io.StringIO()
    coord = Coordinator(settings, tmp_path / "run", out=out)
    cfg = {"loss": "CE", "negatives": 128, "batch_size": 128, "dim": 100}
    coord.store.add(make_row("a", 1, cfg, status="ok", valid={"mrr": 0.7}, test=None, graph="demo-multi_rw-0.2-seed0"))
    coord.store.add(make_row("b", 2, {**cfg, "dim": 400}, status="failed", error="CUDA out of memory"))
    summary = coord.write_outputs()
    assert summary["best"]["trial_id"] == "a" and summary["best"]["from_subgraph"] is True
    assert summary["warnings"] == [SUBGRAPH_ANSWER_WARNING]
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["best"]["from_subgraph"] is True and "subgraph" in saved["warnings"][0]
    assert "[kgtuner] WARNING: stage 2 produced no successful trial" in out.getvalue()
    assert "WARNING: this answer is a stage-1 trial" in out.getvalue()
    coord.store.add(make_row("c", 2, {**cfg, "dim": 200}, status="ok", valid={"mrr": 0.6}, graph="demo"))
    summary = coord.summary()
    assert summary["best"]["trial_id"] == "c" and summary["best"]["from_subgraph"] is False and not summary["warnings"]
