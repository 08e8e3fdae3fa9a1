"""Fidelity of a search's record (issue 21): each trial's own training seed, the final retraining's other seeds,
exact trial budgets, never a silent reduced-fidelity answer, and a failed search's outputs."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from hydra import compose, initialize_config_dir
from ray.tune.search import Searcher

from kgtuner.errors import ConfigError
from kgtuner.paths import CONF_DIR
from kgtuner.tune.budget import Budget
from kgtuner.tune.results import make_row
from kgtuner.tune.seeds import SEED_LIMIT, retrain_seeds, train_seed, trial_seed
from kgtuner.tune.settings import ExperimentSettings

REPO = Path(__file__).resolve().parents[1]


def _settings(*overrides) -> ExperimentSettings:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return ExperimentSettings.from_config(compose(config_name="config", overrides=list(overrides)))


# ------------------------------------------------------------------------------------------ training seeds
def test_every_trial_has_its_own_training_seed():
    seeds = [trial_seed(0, i) for i in range(2000)]
    assert len(set(seeds)) == len(seeds) and all(0 <= s < SEED_LIMIT for s in seeds)
    assert seeds == [trial_seed(0, i) for i in range(2000)]  # reproducible
    assert trial_seed(1, 0) != trial_seed(0, 0) and trial_seed(0, 1) != trial_seed(1, 0)
    # a configuration's own seed wins (a space that fixes it, the final retraining); no index: the experiment's
    assert train_seed({"lr": 0.1}, 3, 7) == trial_seed(7, 3)
    assert train_seed({"lr": 0.1, "seed": 42}, 3, 7) == 42
    assert train_seed({}, None, 7) == 7


def test_retraining_seeds_differ_from_the_selected_runs():
    for selected in (0, 1, trial_seed(0, 5)):
        seeds = retrain_seeds(selected, 5)
        assert len(set(seeds)) == 5 and selected not in seeds and seeds == retrain_seeds(selected, 5)
    assert 0 not in retrain_seeds(0, 3)  # range(3) held the run that had been selected


@pytest.fixture
def tune_session(monkeypatch):
    """``kgtuner_trial`` outside Ray: Tune's session calls recorded (the final report is the last one); Ray's
    runtime context, which would start a local Ray, is out of reach (one thread, the host's name)."""
    import ray
    import torch
    from ray import tune

    def no_runtime():
        raise RuntimeError("not in a Ray worker")

    reports = []
    monkeypatch.setattr(ray, "get_runtime_context", no_runtime)
    monkeypatch.setattr(tune, "report", lambda metrics, checkpoint=None: reports.append(dict(metrics)))
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    monkeypatch.setattr(tune, "get_context", lambda: SimpleNamespace(get_trial_id=lambda: "trial"))
    threads = torch.get_num_threads()
    yield reports
    torch.set_num_threads(threads)
    assert not ray.is_initialized()


def test_a_configuration_trained_twice_is_two_draws_of_training_noise(tune_session):
    """The trainable trains each trial with its own seed: the same configuration as trials 0 and 1 gives two
    different runs, trial 0 again the same run (on today's code every trial trained with seed 0)."""
    from kgtuner.data import load_dataset
    from kgtuner.tune.trainable import kgtuner_trial

    kg = load_dataset("demo")
    key = f"{kg.name}:{len(kg.train)}"
    stages = {2: {"graph_key": key, "deadline_unix": math.inf,
                  "controls": {"max_steps": 30, "valid_every": 10, "patience": 5, "max_epochs": None,
                               "device": "cpu"}}}
    hp = {"dim": 16, "batch_size": 128, "negatives": 8, "loss": "BCE_adv", "lr": 0.05}

    def run(index: int) -> dict:
        kgtuner_trial({**hp, "stage": 2, "trial_index": index}, graphs={key: kg.to_arrays()}, stages=stages,
                      model="complex", checkpoint_every_s=None, experiment_seed=3)
        final = tune_session[-1]
        assert final["trial_status"] == "ok", final
        return final

    first, second, again = run(0), run(1), run(0)
    assert first["train_seed"] == trial_seed(3, 0) == again["train_seed"] != second["train_seed"]
    assert first["valid_mrr"] != second["valid_mrr"]
    assert first["valid_mrr"] == again["valid_mrr"] and first["test_mrr"] == again["test_mrr"]


@pytest.fixture
def coordinator(tmp_path):
    from kgtuner.tune.coordinator import Coordinator

    coord = Coordinator(_settings("seed=5"), tmp_path / "run", out=io.StringIO())
    yield coord
    coord.close()


def test_trials_parquet_records_each_seed_and_best_config_retrains_the_answers_run(coordinator, tmp_path):
    hp = {"loss": "CE", "negatives": 128, "batch_size": 256, "dim": 200, "lr": 0.01}
    done = SimpleNamespace(trial_id="a", config={**hp, "stage": 2, "trial_index": 4},
                           last_result={"stage": 2, "valid_mrr": 0.5, "trial_status": "ok", "train_seed": 1234})
    lost = SimpleNamespace(trial_id="b", config={**hp, "stage": 2, "trial_index": 5}, last_result=None)
    coordinator.on_trial_end(done, None)
    coordinator.on_trial_end(lost, "the worker died")  # no report: the seed it was given, from its index
    rows = pd.read_parquet(coordinator.store.path).set_index("trial_id")
    assert rows.loc["a", "train_seed"] == 1234 and rows.loc["b", "train_seed"] == trial_seed(5, 5)
    assert "seed" not in rows.columns  # not a hyper-parameter column
    summary = coordinator.write_outputs()
    assert summary["best"]["trial_id"] == "a" and summary["best"]["train_seed"] == 1234
    assert summary["status"] == "ok" and summary["error"] is None
    doc = yaml.safe_load((tmp_path / "run" / "best_config.yaml").read_text())
    assert doc["train"]["seed"] == 1234 and doc["train"]["lr"] == 0.01


def test_final_retraining_uses_seeds_other_than_the_selected_runs(coordinator, monkeypatch):
    from ray import tune

    for key in ("RAY_AIR_NEW_OUTPUT", "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S"):
        monkeypatch.setenv(key, "0")
    captured = {}

    class FakeTuner:
        def __init__(self, trainable, param_space, **kwargs):
            captured.update(param_space)

        def fit(self):
            return [SimpleNamespace(metrics={"train_seed": s, "valid_mrr": 0.4, "test_mrr": 0.3})
                    for s in captured["seed"]["grid_search"]]

    monkeypatch.setattr(tune, "Tuner", FakeTuner)
    monkeypatch.setattr(coordinator, "_trainable", lambda refs, deadlines=True: None)
    coordinator.settings = _settings("seed=5", "final.seeds=3")
    cfg = {"loss": "CE", "negatives": 128, "batch_size": 256, "dim": 200}
    coordinator.store.add(make_row("a", 2, cfg, status="ok", valid={"mrr": 0.5}, trial_index=0, train_seed=0))
    final = coordinator._retrain_final({})
    seeds = captured["seed"]["grid_search"]
    assert len(seeds) == 3 and 0 not in seeds and final["selected_seed"] == 0
    assert final["train_seeds"] == seeds and final["seeds"] == 3 and final["test_mrr_mean"] == pytest.approx(0.3)


@pytest.mark.serial
@pytest.mark.slow
def test_best_config_retrains_the_selected_run_itself(tmp_path):
    """best_config.yaml carries the answer's own training seed: kgtuner.train reproduces that run's metrics."""
    import os

    run_dir, retrain = tmp_path / "run", tmp_path / "retrain"
    proc = subprocess.run([sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={run_dir}", "search=random",
                           "seed=1", "budget=trials", "budget.trials=2", "cluster.num_cpus=1",
                           "cluster.include_dashboard=false", "trial.stage2.max_steps=60", "trial.stage2.valid_every=30",
                           "trial.checkpoint_every_s=null"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = pd.read_parquet(run_dir / "trials.parquet").set_index("trial_id")
    assert sorted(rows["train_seed"]) == sorted(trial_seed(1, i) for i in rows["trial_index"])
    best = json.loads((run_dir / "summary.json").read_text())["best"]
    assert best["train_seed"] == rows.loc[best["trial_id"], "train_seed"]
    proc = subprocess.run([sys.executable, "-m", "kgtuner.train", "--config-dir", str(run_dir), "--config-name",
                           "best_config", f"hydra.run.dir={retrain}", "train.device=cpu"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((retrain / "metrics.json").read_text())
    assert metrics["config"]["seed"] == best["train_seed"]
    assert metrics["valid"]["mrr"] == pytest.approx(best["valid"]["mrr"], abs=1e-6)
    assert metrics["test"]["mrr"] == pytest.approx(best["test"]["mrr"], abs=1e-6)


# ------------------------------------------------------------------------------------------ trial budgets
@pytest.mark.parametrize("fraction", [0.5, 0.25, 0.7, 0.99])
def test_a_two_stage_trial_budget_is_split_exactly(fraction):
    for trials in range(1, 60):
        budget = Budget(trials=trials, stage1_fraction=fraction)
        first, second = budget.stage_trials(1, 2), budget.stage_trials(2, 2)
        assert first >= 1 and first + second == trials, (trials, first, second)
        assert second >= 1 or trials == 1
    assert (Budget(trials=1).stage_trials(1, 2), Budget(trials=1).stage_trials(2, 2)) == (1, 0)


def _drive(searcher, slots: int, limit: int = 500) -> int:
    """Play Tune for a strategy's searcher until it answers FINISHED; the number of trials it started."""
    running, started = [], 0
    for _ in range(limit):
        while len(running) < slots:
            config = searcher.suggest(f"t{started}")
            if config == Searcher.FINISHED:
                return started
            if config is None:
                break
            running.append(f"t{started}")
            started += 1
        assert running, "the searcher waits with nothing running"
        tid = running.pop(0)
        searcher.on_trial_complete(tid, {"valid_mrr": 0.1 + 0.7 * ((int(tid[1:]) * 37) % 11) / 11,
                                         "trial_status": "ok"})
    raise AssertionError("the searcher never finished")


@pytest.mark.parametrize("search, trials", [
    ("kgtuner", 1), ("kgtuner", 2), ("kgtuner", 7), ("kgtuner_asha", 1), ("kgtuner_asha", 5),
    ("random", 1), ("random", 4), ("tpe", 1), ("tpe", 3), ("rf_bore", 1), ("rf_bore", 4),
    ("grash", 1), ("grash", 3), ("grash", 6),
])
def test_a_trial_budget_runs_exactly_that_many_trials(live, search, trials):
    """budget.trials=1 ran 2 trials under KGTuner (1 per stage); every strategy starts exactly T (GraSH: its
    rounds' sum, the most that fits, which is T here)."""
    extra = ["search.rounds=1"] if search == "grash" and trials < 3 else []
    settings = _settings(f"search={search}", "budget=trials", f"budget.trials={trials}", *extra)
    strategy = settings.make_strategy()
    assert _drive(strategy.searcher(strategy.space("demo"), 2), slots=2) == trials


def test_grash_refuses_num_configs_beyond_the_trial_budget():
    with pytest.raises(ConfigError, match=r"search\.num_configs=16 runs 21 trials .* budget\.trials=20"):
        _settings("search=grash", "budget=trials", "budget.trials=20", "search.num_configs=16")
    assert _settings("search=grash", "budget=trials", "budget.trials=21", "search.num_configs=16").options


# ------------------------------------------------------------------------------------------ the answer
def _outputs(settings, rows, tmp_path):
    """summary.json (and the log) of a run whose trials ended as ``rows`` (the strategy prepared on the demo)."""
    from kgtuner.data import load_dataset
    from kgtuner.tune.coordinator import Coordinator

    out = io.StringIO()
    coord = Coordinator(settings, tmp_path / "run", out=out)
    try:
        coord.strategy.prepare(load_dataset("demo"))
        for row in rows:
            coord.store.add(row)
        return coord.write_outputs(), out.getvalue()
    finally:
        coord.close()


def test_a_grash_answer_from_an_earlier_round_is_never_silent(tmp_path):
    cfg = {"loss": "CE", "negatives": 128, "batch_size": 256, "dim": 200}
    round1 = make_row("a", 1, cfg, status="ok", valid={"mrr": 0.6}, graph="demo-pagerank-0.25-seed0")
    summary, log = _outputs(_settings("search=grash", "budget.seconds=60"), [round1], tmp_path)
    best = summary["best"]
    assert best["trial_id"] == "a" and best["from_subgraph"] is True and best["stage1_sizes"] is False
    assert len(summary["warnings"]) == 1 and "round 1" in summary["warnings"][0]
    assert "subgraph" in summary["warnings"][0] and "WARNING: GraSH did not finish its last round" in log
    # the epoch variant trains every round on the full graph: not a subgraph answer, still a warning
    summary, _ = _outputs(_settings("search=grash", "budget.seconds=60", "search.variant=epoch"),
                          [make_row("a", 2, cfg, status="ok", valid={"mrr": 0.6}, graph="demo")], tmp_path / "e")
    assert summary["best"]["from_subgraph"] is False and "round 2" in summary["warnings"][0]
    # the last round's answer: no warning
    summary, _ = _outputs(_settings("search=grash", "budget.seconds=60"),
                          [make_row("c", 3, cfg, status="ok", valid={"mrr": 0.6}, graph="demo")], tmp_path / "l")
    assert summary["best"]["from_subgraph"] is False and summary["warnings"] == []


def test_a_stage1_answer_on_the_full_graph_says_it_has_stage1_sizes(tmp_path):
    """search.subgraph_ratio=1: the stage-1 answer is not from a subgraph, but trained at stage 1's sizes."""
    from kgtuner.tune.strategies.kgtuner import STAGE1_SIZES_WARNING, SUBGRAPH_ANSWER_WARNING

    cfg = {"loss": "CE", "negatives": 128, "batch_size": 128, "dim": 100}
    row = make_row("a", 1, cfg, status="ok", valid={"mrr": 0.7}, graph="demo")
    summary, log = _outputs(_settings("search.subgraph_ratio=1"), [row], tmp_path)
    assert summary["best"]["from_subgraph"] is False and summary["best"]["stage1_sizes"] is True
    assert summary["warnings"] == [STAGE1_SIZES_WARNING] and "WARNING: this answer is a stage-1 trial" in log
    assert "full graph at stage-1 sizes" in summary["best"]["strategy"]["description"]
    summary, _ = _outputs(_settings(), [row], tmp_path / "sub")
    assert summary["best"]["from_subgraph"] is True and summary["best"]["stage1_sizes"] is True
    assert summary["warnings"] == [SUBGRAPH_ANSWER_WARNING]


# ------------------------------------------------------------------------------------------ a failed search
@pytest.mark.serial
@pytest.mark.slow
def test_a_search_whose_stage1_trials_all_fail_keeps_its_evidence(tmp_path):
    """Every stage-1 trial fails: trials.parquet and summary.json (status failed, the reason) are written,
    and the launch still ends with one error line and exit code 2."""
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={run_dir}", "budget=trials",
                           "budget.trials=2", "trial.inject_failures=[0]", "cluster.num_cpus=1",
                           "cluster.include_dashboard=false"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("kgtuner: error:")]
    assert len(lines) == 1 and "stage 1 produced no successful trial" in lines[0], proc.stderr[-3000:]
    rows = pd.read_parquet(run_dir / "trials.parquet")
    assert list(rows["status"]) == ["failed"] and "injected failure" in rows["error"].iloc[0]
    assert list(rows["train_seed"]) == [trial_seed(0, 0)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "stage 1 produced no successful trial" in summary["error"]
    assert summary["best"] is None and summary["trials_per_stage"] == {"1": 1}
    assert "status: FAILED" in proc.stdout


def test_validation_cap_is_a_checked_stage_setting():
    s = _settings()
    assert s.trial.stage1.max_valid_triples == 5000 and s.trial.stage2.max_valid_triples is None
    strategy = s.make_strategy()
    assert strategy.answer_controls()["max_valid_triples"] is None
    with pytest.raises(ConfigError, match=r"trial\.stage1\.max_valid_triples must be"):
        _settings("trial.stage1.max_valid_triples=-1")
    assert _settings("trial.stage1.max_valid_triples=null").trial.stage1.max_valid_triples is None


def test_a_trial_restored_after_its_stage_deadline_reports_its_checkpoints_best(tune_session, monkeypatch, tmp_path):
    """A trial Tune restores from its checkpoint once its stage's deadline has passed (a driver resumed at the switch,
    a worker lost near the deadline) reports the best validation its checkpoint holds, not an empty result: before,
    it ended as "stage ended before the trial started" with no validation and fell out of stage 1's ranking (found by
    scripts/ops/chaos.py)."""
    import shutil
    import time

    from ray import tune

    from kgtuner.data import load_dataset
    from kgtuner.tune.trainable import kgtuner_trial

    kg = load_dataset("demo")
    key = f"{kg.name}:{len(kg.train)}"
    controls = {"max_steps": 30, "valid_every": 10, "patience": 5, "max_epochs": None, "device": "cpu"}
    hp = {"dim": 16, "batch_size": 128, "negatives": 8, "loss": "BCE_adv", "lr": 0.05}
    saved = tmp_path / "checkpoint"

    def report(metrics, checkpoint=None):
        tune_session.append(dict(metrics))
        if checkpoint is not None and not saved.exists():  # the first checkpoint, mid-training (step 10 of 30)
            with checkpoint.as_directory() as d:
                shutil.copytree(d, saved)

    monkeypatch.setattr(tune, "report", report)
    stages = {1: {"graph_key": key, "deadline_unix": math.inf, "controls": controls}}
    kgtuner_trial({**hp, "stage": 1, "trial_index": 0}, graphs={key: kg.to_arrays()}, stages=stages, model="complex",
                  checkpoint_every_s=0, experiment_seed=3)
    best = tune_session[0]["valid_mrr"]  # the first validation's, which the first checkpoint holds
    assert saved.is_dir() and best > 0 and tune_session[0]["step"] == 10
    tune_session.clear()
    monkeypatch.setattr(tune, "get_checkpoint", lambda: tune.Checkpoint.from_directory(str(saved)))
    past = {1: {"graph_key": key, "deadline_unix": time.time() - 1.0, "controls": controls}}
    kgtuner_trial({**hp, "stage": 1, "trial_index": 0}, graphs={key: kg.to_arrays()}, stages=past, model="complex",
                  checkpoint_every_s=0, experiment_seed=3)
    final = tune_session[-1]
    assert final["done"] and final["trial_status"] == "stopped", final
    assert final["valid_mrr"] == pytest.approx(best) and final.get("test_mrr") is not None


def test_a_trials_row_is_written_at_its_final_report_not_only_at_tunes_end_event(coordinator):
    """The driver writes a trial's row when the trial's final report arrives: a driver killed between that report and
    Tune's end event (which Tune handles later) loses no finished trial (found by scripts/ops/chaos.py: a trial that
    started after Tune's last save and finished just before a kill -9 had no row and its trial_index came again).
    The end event writes nothing more (a failure after the final report replaces the row)."""
    hp = {"loss": "CE", "negatives": 128, "batch_size": 256, "dim": 200, "lr": 0.01}
    trial = SimpleNamespace(trial_id="a", config={**hp, "stage": 2, "trial_index": 7}, last_result=None)
    coordinator.on_trial_start(trial)
    coordinator.on_trial_result(trial, {"stage": 2, "step": 10, "valid_mrr": 0.3, "done": False})
    assert "a" not in coordinator.store
    final = {"stage": 2, "step": 20, "valid_mrr": 0.4, "test_mrr": 0.38, "done": True, "trial_status": "ok",
             "train_seed": 99}
    coordinator.on_trial_result(trial, final)
    rows = pd.read_parquet(coordinator.store.path)
    assert list(rows["trial_id"]) == ["a"] and rows["valid_mrr"].iloc[0] == 0.4 and rows["trial_index"].iloc[0] == 7
    written = coordinator.store.path.stat().st_mtime_ns
    coordinator.on_trial_end(SimpleNamespace(**{**vars(trial), "last_result": final}), None)
    assert coordinator.store.path.stat().st_mtime_ns == written  # one write per trial, as before
    again = pd.read_parquet(coordinator.store.path)
    assert len(again) == 1 and again["valid_mrr"].iloc[0] == 0.4 and again["status"].iloc[0] == "ok"
    # a failure Tune reports after the final report (e.g. its checkpoint could not be saved) replaces the row
    coordinator.on_trial_end(SimpleNamespace(**{**vars(trial), "last_result": final}), "the actor died")
    assert pd.read_parquet(coordinator.store.path)["status"].iloc[0] == "failed"
