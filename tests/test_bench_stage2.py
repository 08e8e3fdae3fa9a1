"""scripts/benchmarks/bench_stage2.py: the stage-2 replay on a small two-fidelity record (synthetic MRRs, real
searcher)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from kgtuner.search import load_space

REPO = Path(__file__).resolve().parents[1]


def _tables(tmp_path: Path, n: int = 24) -> tuple[Path, Path]:
    """A stage-1 table of n configurations and the full-graph table of all of them at every expansion; MRR
    rises with lr on both fidelities (full graph: larger dim better), so a forest can learn it."""
    space = load_space("decoupled", model="complex", dataset="codex-s")
    rng = np.random.default_rng(0)
    s1, s2 = [], []
    for i in range(n):
        cfg = space.sample(rng)
        lr = np.log10(cfg["lr"]) + 4  # 0..3
        s1.append({"index": i, "config": cfg, "valid_mrr": 0.1 * lr, "seconds": 5.0 + i % 3, "dataset": "codex-s",
                   "model": "complex", "space": "decoupled"})
        for b in (256, 512):
            for d in (200, 400):
                s2.append({"index": i, "config": {**cfg, "batch_size": b, "dim": d},
                           "valid_mrr": 0.1 * lr + d / 4000, "seconds": 10.0 + d / 100, "graph": "codex-s"})
    p1, p2 = tmp_path / "s1.jsonl", tmp_path / "s2.jsonl"
    p1.write_text("".join(json.dumps(r) + "\n" for r in s1))
    p2.write_text("".join(json.dumps(r) + "\n" for r in s2))
    return p1, p2


def test_stage2_replay_runs_the_real_searcher_on_the_record(tmp_path):
    p1, p2 = _tables(tmp_path)
    out = tmp_path / "replay.parquet"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "benchmarks" / "bench_stage2.py"),
                           "--stage1", str(p1), "--stage2", str(p2), "--seeds", "2", "--workers", "2",
                           "--stage1-trials", "10", "--stage2-trials", "6", "--ks", "2", "6", "--fast", "--no-record",
                           "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    df = pd.read_parquet(out)
    assert set(df.variant) == {"ordered", "warm", "warm_no_thompson"} and set(df.seed) == {0, 1}
    assert df.groupby(["seed", "variant"]).k.max().eq(6).all()  # 6 stage-2 trials per replay
    warm = df[df.variant == "warm"]
    assert (warm.prior_observations == 10).all() and (df[df.variant == "ordered"].prior_observations == 0).all()
    assert (df.groupby(["seed", "variant"]).best_valid_mrr.apply(lambda s: s.is_monotonic_increasing)).all()
    assert "diff [95% CI]" in proc.stdout and "recorded on demand by this replay: 0" in proc.stdout
