"""End to end (issue 39): ``trial.stage1_per_gpu=2`` on 2 logical GPUs runs KGTuner's stage-1 trials 4 at a time
with half a GPU each, then stage 2 one trial per GPU (at most 2 at once); ``trial.stage1_per_gpu=auto`` with the GPU
memory given packs GraSH's first round (on a subgraph) 2 per GPU -- core-bound: 4 CPUs on 2 GPUs -- and runs its last
round one trial per GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.serial  # starts Ray: one at a time (make test)

REPO = Path(__file__).resolve().parents[1]


def _overlaps(rows: pd.DataFrame) -> list[set[int]]:
    """For each moment some trial started, the rows (index) running then."""
    out = []
    for t in sorted(rows["start_s"]):
        out.append({i for i, r in rows.iterrows() if r["start_s"] <= t < r["end_s"]})
    return out


@pytest.mark.slow
def test_stage1_trials_share_gpus_and_stage2_trials_get_whole_ones(tmp_path):
    run_dir = tmp_path / "run"
    # budget.trials=10: 5 stage-1 trials (4 start at once on 4 half-GPU slots), then 5 stage-2 trials on 2 GPUs
    proc = subprocess.run([sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={run_dir}",
                           "cluster.include_dashboard=false", "cluster.num_gpus=2", "trial.stage1_per_gpu=2",
                           "budget=trials", "budget.trials=10", "search.top_k=2", "trial.stage1.max_steps=150",
                           "trial.stage1.valid_every=50", "trial.stage2.max_steps=100", "trial.stage2.valid_every=50",
                           "answer.keep=0"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    cpu = summary["cluster"]["resources_per_trial"]["cpu"]
    assert summary["cluster"]["slots"] == 2 and summary["cluster"]["resources_per_trial"]["gpu"] == 1
    assert summary["cluster"]["stages"] == {"1": {"slots": 4, "per_gpu": 2, "resources_per_trial": {"gpu": 0.5, "cpu": cpu / 2}}}
    assert "stage 1: 4 concurrent trials, {'gpu': 0.5" in proc.stdout and "(trial.stage1_per_gpu=2)" in proc.stdout

    df = pd.read_parquet(run_dir / "trials.parquet")
    assert (df.stage == 1).sum() == 5 and (df.stage == 2).sum() == 5
    assert set(df["status"]) <= {"ok"}, df[["stage", "status", "error"]]
    # stage 1: 4 trials at once on 2 GPUs -- only possible with half a GPU each -- and never more than 2 on a GPU;
    # stage 2: one trial per GPU again (at most 2 at once, never two on the same GPU), after every stage-1 trial
    _check_packed_then_whole(df[df.stage == 1].reset_index(drop=True), df[df.stage == 2].reset_index(drop=True))


def _check_packed_then_whole(first: pd.DataFrame, second: pd.DataFrame) -> None:
    """``first``: 4 trials at once on 2 GPUs, never more than 2 on one; ``second``: at most 2 at once, never two on one
    GPU, after every trial of ``first`` ended."""
    running1 = _overlaps(first)
    assert max(len(r) for r in running1) == 4, first[["start_s", "end_s", "gpu"]]
    for running in running1:
        per_gpu = first.loc[sorted(running), "gpu"].value_counts()
        assert per_gpu.max() <= 2 and set(per_gpu.index) <= {"0", "1"}, first.loc[sorted(running)]
    for running in _overlaps(second):
        assert len(running) <= 2, second[["start_s", "end_s", "gpu"]]
        assert second.loc[sorted(running), "gpu"].is_unique, second.loc[sorted(running)]
    assert second["start_s"].min() >= first["end_s"].max() - 1e-6


@pytest.mark.slow
def test_auto_packs_grashs_subgraph_round_and_not_its_last(tmp_path):
    run_dir = tmp_path / "run"
    # 2 rounds, eta 2, budget.trials=6: 4 configurations on the subgraph (4 start at once), then the top 2 on the graph
    # (the decoupled space keeps the last round's trials small: dimension 100, batch 128)
    proc = subprocess.run([sys.executable, "-m", "kgtuner.launch", "search=grash", "space=decoupled",
                           f"hydra.run.dir={run_dir}",
                           "cluster.include_dashboard=false", "cluster.num_gpus=2", "cluster.num_cpus=4",
                           "trial.stage1_per_gpu=auto", "trial.gpu_memory_gb=80", "search.rounds=2", "search.eta=2",
                           "budget=trials", "budget.trials=6", "trial.stage2.max_steps=60",
                           "trial.stage2.valid_every=30", "trial.checkpoint_every_s=null", "answer.keep=0"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["cluster"]["slots"] == 2 and summary["cluster"]["resources_per_trial"] == {"gpu": 1, "cpu": 2.0}
    assert summary["cluster"]["stages"] == {"1": {"slots": 4, "per_gpu": 2, "resources_per_trial": {"gpu": 0.5, "cpu": 1.0}}}
    assert "trial.stage1_per_gpu=auto: stage 1 runs 2 trials per GPU share" in proc.stdout
    assert "k=2, cores-bound" in proc.stdout and "(GPU memory: trial.gpu_memory_gb=80)" in proc.stdout
    assert "round 1: 4 concurrent trials" in proc.stdout

    df = pd.read_parquet(run_dir / "trials.parquet")
    assert df.groupby("stage").size().to_dict() == {1: 4, 2: 2}
    assert set(df["status"]) <= {"ok"}, df[["stage", "status", "error"]]
    _check_packed_then_whole(df[df.stage == 1].reset_index(drop=True), df[df.stage == 2].reset_index(drop=True))
