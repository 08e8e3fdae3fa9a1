"""An evaluator independent of kgtuner's: filtered link prediction for a ComplEx ``embeddings.npz`` on the
demo graph, read from the raw ``train/valid/test.txt`` files with numpy only (float64, one query at a time).

Protocol (the one kgtuner documents): for every test triple (h, r, t), a tail query scores every entity x as
a tail and a head query scores every x as a head; the other true triples of train, valid and test are
filtered out; the rank is the mean of the optimistic and pessimistic rank (1 + #better + #ties / 2).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

DEMO = Path(__file__).resolve().parents[1] / "kgtuner" / "datasets" / "demo"


def _triples(split: str) -> list[tuple[str, str, str]]:
    rows = []
    for line in (DEMO / f"{split}.txt").read_text().splitlines():
        if line.strip():
            h, r, t = line.split("\t")
            rows.append((h, r, t))
    return rows


def complex_filtered_ranks(embeddings: Path) -> np.ndarray:
    """Ranks of every head and tail test query of the demo graph under the ComplEx model in ``embeddings``
    (rows: dim/2 real parts, then dim/2 imaginary parts; ``relation`` rows R..2R-1, if any, are the inverse
    relations: head queries (?, r, t) are then scored as (t, r + R, ?))."""
    arrays = np.load(embeddings)
    ent = {name: i for i, name in enumerate(arrays["entity_names"].tolist())}
    rel = {name: i for i, name in enumerate(arrays["relation_names"].tolist())}
    known = {(ent[h], rel[r], ent[t]) for split in ("train", "valid", "test") for h, r, t in _triples(split)
             if h in ent and t in ent and r in rel}
    test = [(ent[h], rel[r], ent[t]) for h, r, t in _triples("test") if h in ent and t in ent and r in rel]
    half = arrays["entity"].shape[1] // 2
    E = arrays["entity"][:, :half].astype(np.float64) + 1j * arrays["entity"][:, half:].astype(np.float64)
    R = arrays["relation"][:, :half].astype(np.float64) + 1j * arrays["relation"][:, half:].astype(np.float64)
    inverse = R.shape[0] == 2 * len(rel)
    ranks = []
    for h, r, t in test:
        tails = np.real((E[h] * R[r]) @ np.conj(E).T)
        heads = np.real((E[t] * R[r + len(rel)]) @ np.conj(E).T) if inverse else np.real(E @ (R[r] * np.conj(E[t])))
        for scores, true, triple in ((tails, t, lambda x: (h, r, x)), (heads, h, lambda x: (x, r, t))):
            keep = np.array([x == true or triple(x) not in known for x in range(len(scores))])
            better = int(np.sum((scores > scores[true]) & keep))
            ties = int(np.sum((scores == scores[true]) & keep)) - 1
            ranks.append(1.0 + better + ties / 2.0)
    return np.asarray(ranks)


def check_answer_model(run_dir: Path) -> float:
    """The run's ``embeddings.npz`` reproduce the test MRR of ``metrics.json`` and ``summary.json``; returns it."""
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    ranks = complex_filtered_ranks(run_dir / "embeddings.npz")
    mrr = float(np.mean(1.0 / ranks))
    assert abs(mrr - summary["best"]["test"]["mrr"]) < 1e-5, (mrr, summary["best"]["test"])
    assert abs(float(np.mean(ranks <= 10)) - summary["best"]["test"]["hits@10"]) < 1e-5
    assert metrics["test"] == summary["best"]["test"] and metrics["valid"] == summary["best"]["valid"]
    return mrr


def _node_id(value) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{56}", value) is not None


def check_search_left_the_answers_model(run_dir: Path, stdout: str, tmp_path: Path, keep: int) -> None:
    """A finished KGTuner search (``answer.keep=KEEP``, ``trial.checkpoint_every_s=0``) left the answer's model:
    metrics.json and embeddings.npz in the run directory, scored independently to summary.json's test MRR; at
    most 2 checkpoints per trial, models only in the stage-2 trials that ranked among the best ``keep`` when they
    ended; trials.parquet's node columns; the files are those of ``python -m kgtuner.train``."""
    import subprocess
    import sys

    import pandas as pd

    from kgtuner.tune.answer_model import RECORD_FILE

    summary = json.loads((run_dir / "summary.json").read_text())
    trials = pd.read_parquet(run_dir / "trials.parquet")
    best = summary["best"]
    assert best["stage"] == 2
    assert best["strategy"]["search"] == "kgtuner" and best["strategy"]["stage"] == 2
    assert "stage 2" in best["strategy"]["description"] and summary["early_stop"] is None
    assert f"produced by: {best['strategy']['description']}" in stdout

    # the exact model of the answer: an independent evaluator reproduces summary.json's test MRR
    info = summary["answer_model"]
    assert info["trial_id"] == best["trial_id"] and set(info["files"]) == {"metrics.json", "embeddings.npz"}
    check_answer_model(run_dir)

    # Tune kept at most 2 checkpoints per trial; every trial's newest is its final record; models only in
    # stage-2 trials, and only in those that ranked among the best keep when they ended
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
        if row.trial_id not in kept:  # it read a threshold: keep better trials had ended (recorded) by then
            better = stage2[(stage2.valid_mrr > row.valid_mrr) & (stage2.end_s <= row.end_s + 5.0)]
            assert len(better) >= keep, (row.trial_id, row.valid_mrr, stage2[["trial_id", "valid_mrr", "end_s"]])

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
