"""The answer's trained model stays with the run: the best trial's embeddings.npz and metrics.json (the
format of `python -m kgtuner.train`) land in the run directory, their test MRR is the one summary.json
reports (checked by an independent evaluator), Tune's CheckpointConfig bounds what each trial keeps, and
only answer-stage trials that rank among the `answer.keep` best keep a model."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from answer_helpers import check_answer_model
from kgtuner.errors import ConfigError
from kgtuner.tune.answer_model import RECORD_FILE, final_checkpoint, final_record, keep_threshold, parse_keep

KEEP = 2


@pytest.mark.parametrize("raw,message", [
    ({"answer": {"keep": -1}}, "answer.keep must be a whole number >= 0"),
    ({"answer": {"keep": "all"}}, "answer.keep must be a whole number >= 0"),
    ({"answer": {"keep": True}}, "answer.keep must be a whole number >= 0"),
    ({"answer": {"kept": 2}}, "answer.kept is not a setting"),
])
def test_keep_setting_is_validated(raw, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_keep(raw)
    assert parse_keep({}) == 3 and parse_keep({"answer": {"keep": 0}}) == 0


def test_keep_threshold_is_the_keep_th_best_so_far():
    assert keep_threshold([0.2, 0.5], 3) is None  # fewer than keep ended: every trial keeps its model
    assert keep_threshold([0.2, 0.5, float("nan"), 0.4, 0.3], 3) == 0.3
    assert keep_threshold([0.9], 1) == 0.9
    assert keep_threshold([0.9], 0) == math.inf


def test_final_checkpoint_record_and_restore(tmp_path):
    report = {"valid_mrr": 0.5, "done": True, "trial_status": "ok", "stage": 1}
    with final_checkpoint(None, report, stage=1) as none:
        assert none is None  # a search that keeps no answer models reports no final checkpoint
    answer = {"key": None, "stage": 2, "keep": 3}  # a stage-1 trial never keeps a model
    with final_checkpoint(answer, report, stage=1, metrics={"valid": {"mrr": 0.5}}, model=object()) as ckpt:
        files = sorted(p.name for p in Path(ckpt.path).iterdir())
        assert files == [RECORD_FILE]
        assert final_record(ckpt) == report
        saved = json.loads((Path(ckpt.path) / RECORD_FILE).read_text())
        assert saved["final"] is True and saved["model"] is False
    from ray import tune

    restore_point = tmp_path / "restore"
    restore_point.mkdir()
    (restore_point / "trainer_state.pt").write_bytes(b"x")
    assert final_record(tune.Checkpoint.from_directory(str(restore_point))) is None
    assert final_record(None) is None


def test_strategy_names_the_search_and_stage():
    from kgtuner.tune.strategies.one_stage import OneStage

    class Settings:
        search_name, options = "random", None
        search = {"name": "random"}

    strategy = OneStage(Settings).describe_answer({"stage": 1, "trial_id": "x"}, {}, early_stopped=True)
    assert strategy["search"] == "random" and strategy["stage"] == 1 and strategy["early_stopped"] is True
    assert "one-stage random search" in strategy["description"] and "ASHA" in strategy["description"]


def _node_id(value) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{56}", value) is not None


@pytest.mark.slow
def test_search_leaves_the_answers_model_in_the_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={run_dir}", "cluster.include_dashboard=false",
         "cluster.num_gpus=3", "model=complex", f"answer.keep={KEEP}", "budget=trials", "budget.trials=12",
         "trial.stage1.max_steps=50", "trial.stage1.valid_every=25", "trial.stage2.max_steps=50",
         "trial.stage2.valid_every=25", "trial.checkpoint_every_s=0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    trials = pd.read_parquet(run_dir / "trials.parquet")
    best = summary["best"]
    assert best["stage"] == 2
    assert best["strategy"]["search"] == "kgtuner" and best["strategy"]["stage"] == 2
    assert "stage 2" in best["strategy"]["description"] and summary["early_stop"] is None
    assert f"produced by: {best['strategy']['description']}" in proc.stdout

    # the exact model of the answer: an independent evaluator reproduces summary.json's test MRR
    info = summary["answer_model"]
    assert info["trial_id"] == best["trial_id"] and set(info["files"]) == {"metrics.json", "embeddings.npz"}
    check_answer_model(run_dir)

    # Tune kept at most 2 checkpoints per trial; every trial's newest is its final record; models only in
    # stage-2 trials, and only in those that ranked among the best KEEP when they ended
    kept = set()
    for trial_dir in (run_dir / "search").glob("trial_*"):
        checkpoints = sorted(trial_dir.glob("checkpoint_*"))
        assert 1 <= len(checkpoints) <= 2, checkpoints
        record = json.loads((checkpoints[-1] / RECORD_FILE).read_text())
        assert record["final"] is True
        if record["model"]:
            kept.add(trial_dir.name[len("trial_"):])
            assert (checkpoints[-1] / "embeddings.npz").exists()
    assert info["models_kept"] == len(kept) and best["trial_id"] in kept
    stage2 = trials[(trials.stage == 2) & (trials.status == "ok")]
    assert kept <= set(stage2.trial_id) and len(stage2) >= 4
    for row in stage2.itertuples():
        if row.trial_id not in kept:  # it read a threshold: KEEP better trials had ended (recorded) by then
            better = stage2[(stage2.valid_mrr > row.valid_mrr) & (stage2.end_s <= row.end_s + 5.0)]
            assert len(better) >= KEEP, (row.trial_id, row.valid_mrr, stage2[["trial_id", "valid_mrr", "end_s"]])

    # trials.parquet: the Ray node ID, and the IP beside it
    assert trials["node"].map(_node_id).all(), trials["node"]
    assert trials["node_ip"].str.fullmatch(r"\d+\.\d+\.\d+\.\d+").all()

    # same files as `python -m kgtuner.train`, which still retrains the answer (here with another seed)
    retrain = tmp_path / "retrain"
    proc = subprocess.run([sys.executable, "-m", "kgtuner.train", "--config-dir", str(run_dir), "--config-name",
                           "best_config", f"hydra.run.dir={retrain}", "train.max_steps=10", "train.valid_every=5",
                           "train.seed=1"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours, theirs = json.loads((run_dir / "metrics.json").read_text()), json.loads((retrain / "metrics.json").read_text())
    assert list(ours) == list(theirs) and ours["config"].keys() == theirs["config"].keys()
    assert theirs["config"]["seed"] == 1
    a, b = np.load(run_dir / "embeddings.npz"), np.load(retrain / "embeddings.npz")
    assert sorted(a.files) == sorted(b.files)
    assert all(a[k].shape == b[k].shape and a[k].dtype == b[k].dtype for k in a.files)
