"""End to end (issue 39): ``trial.stage1_per_gpu=2`` on 2 logical GPUs runs KGTuner's stage-1 trials 4 at a time
with half a GPU each, then stage 2 one trial per GPU (at most 2 at once)."""

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
    assert summary["cluster"]["stages"] == {"1": {"slots": 4, "resources_per_trial": {"gpu": 0.5, "cpu": cpu / 2}}}
    assert "stage 1: 4 concurrent trials, {'gpu': 0.5" in proc.stdout and "(trial.stage1_per_gpu=2)" in proc.stdout

    df = pd.read_parquet(run_dir / "trials.parquet")
    assert (df.stage == 1).sum() == 5 and (df.stage == 2).sum() == 5
    assert set(df["status"]) <= {"ok"}, df[["stage", "status", "error"]]
    one, two = df[df.stage == 1].reset_index(drop=True), df[df.stage == 2].reset_index(drop=True)
    # stage 1: 4 trials at once on 2 GPUs -- only possible with half a GPU each -- and never more than 2 on a GPU
    running1 = _overlaps(one)
    assert max(len(r) for r in running1) == 4, one[["start_s", "end_s", "gpu"]]
    for running in running1:
        per_gpu = one.loc[sorted(running), "gpu"].value_counts()
        assert per_gpu.max() <= 2 and set(per_gpu.index) <= {"0", "1"}, one.loc[sorted(running)]
    # stage 2: one trial per GPU again -- at most 2 at once, never two on the same GPU
    for running in _overlaps(two):
        assert len(running) <= 2, two[["start_s", "end_s", "gpu"]]
        assert two.loc[sorted(running), "gpu"].is_unique, two.loc[sorted(running)]
    assert two["start_s"].min() >= one["end_s"].max() - 1e-6  # the switch waited for every stage-1 trial
