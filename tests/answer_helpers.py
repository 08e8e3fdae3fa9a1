"""An evaluator independent of kgtuner's: filtered link prediction for a ComplEx ``embeddings.npz`` on the
demo graph, read from the raw ``train/valid/test.txt`` files with numpy only (float64, one query at a time).

Protocol (the one kgtuner documents): for every test triple (h, r, t), a tail query scores every entity x as
a tail and a head query scores every x as a head; the other true triples of train, valid and test are
filtered out; the rank is the mean of the optimistic and pessimistic rank (1 + #better + #ties / 2).
"""

from __future__ import annotations

import json
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
