"""kgtuner.analysis: SRCC consistency, stage matching, random-forest importances, the CLI, the ablation core."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from kgtuner.analysis import (
    hp_importance,
    load_trials,
    spearman,
    srcc_consistency,
    stage_consistency,
)
from kgtuner.analysis.cli import main as cli_main
from kgtuner.analysis.srcc import rankdata
from kgtuner.errors import ConfigError, DataError
from kgtuner.search import load_space
from kgtuner.tune.results import make_row, rows_to_frame


def trials_file(path, entries):
    """Write a real trials.parquet from (config, valid_mrr, status[, stage]) entries; return its path."""
    rows = []
    for i, entry in enumerate(entries):
        cfg, mrr, status, stage = (*entry, 1)[:4]
        rows.append(make_row(f"t{i}", stage, cfg, status=status, valid=None if mrr is None else {"mrr": mrr},
                             end_s=float(i), graph="full", steps=100, trial_index=i))
    path.parent.mkdir(parents=True, exist_ok=True)
    rows_to_frame(rows).to_parquet(path, index=False)
    return path


def cfg(lr, loss="CE", **kw):
    return {"lr": lr, "loss": loss, "negatives": 128, "batch_size": 128, "dim": 100, **kw}


# ---------------------------------------------------------------------------------- spearman
def test_spearman_matches_scipy_with_ties_and_rank_fallback():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, 40).astype(float), rng.normal(size=40)
    assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic)
    np.testing.assert_allclose(rankdata(a), stats.rankdata(a))
    ra, rb = rankdata(a), rankdata(b)
    assert np.corrcoef(ra, rb)[0, 1] == pytest.approx(spearman(a, b))
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3])) and math.isnan(spearman([1], [2]))


# ------------------------------------------------------------------------------ two trial files
def test_srcc_perfect_and_reversed_between_two_files(tmp_path):
    lrs = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
    sub = trials_file(tmp_path / "sub" / "trials.parquet", [(cfg(lr), 0.1 * i, "ok") for i, lr in enumerate(lrs)])
    # the full-graph run trains the same configs at a larger dim/batch (ignored by default)
    same = trials_file(tmp_path / "a.parquet",
                       [(cfg(lr, dim=1000, batch_size=512), 0.3 + 0.01 * i, "ok") for i, lr in enumerate(lrs)])
    rev = trials_file(tmp_path / "b.parquet",
                      [(cfg(lr, dim=1000, batch_size=512), 0.5 - 0.01 * i, "ok") for i, lr in enumerate(lrs)])
    r = srcc_consistency(tmp_path / "sub", same, top_k=2)  # a run folder works as well as the file
    assert (r.srcc, r.n, r.only_a, r.only_b) == (pytest.approx(1.0), 5, 0, 0)
    assert (r.top_k_overlap, r.top_k_best_ratio, r.top_k_srcc) == (1.0, 1.0, pytest.approx(1.0))
    r = srcc_consistency(sub, rev, top_k=2)
    assert r.srcc == pytest.approx(-1.0) and r.top_k_overlap == 0.0
    assert r.top_k_best_ratio == pytest.approx(0.47 / 0.5)  # best full score among sub's top-2 (i=3) / best (i=0)
    with pytest.raises(DataError, match="only 0 configuration"):
        srcc_consistency(sub, rev, ignore=())  # dim/batch differ: nothing matches


def test_srcc_matched_by_keys_drops_mismatches_failed_and_averages_repeats(tmp_path):
    a = trials_file(tmp_path / "a.parquet", [
        (cfg(1e-3, seed=1), 0.2, "ok"), (cfg(2e-3, seed=1), 0.4, "ok"), (cfg(3e-3, seed=1), 0.3, "ok"),
        (cfg(4e-3, seed=1), 0.9, "failed"), (cfg(5e-3, seed=1), 0.1, "ok"),   # only in a
        (cfg(6e-3, seed=1), 0.5, "ok"), (cfg(6e-3, seed=2), 0.7, "ok"),       # repeated: mean 0.6
    ])
    b = trials_file(tmp_path / "b.parquet", [
        (cfg(1e-3, seed=9), 0.25, "ok"), (cfg(2e-3, seed=9), 0.35, "ok"), (cfg(3e-3, seed=9), 0.45, "ok"),
        (cfg(4e-3, seed=9), 0.55, "ok"), (cfg(6e-3, seed=9), 0.65, "ok"), (cfg(7e-3, seed=9), 0.05, "ok"),
    ])
    r = srcc_consistency(a, b, keys=["lr", "loss"])
    assert (r.n, r.only_a, r.only_b) == (4, 1, 2)   # lr 4e-3 failed in a -> only in b, with 7e-3
    expected = stats.spearmanr([0.2, 0.4, 0.3, 0.6], [0.25, 0.35, 0.45, 0.65]).statistic
    assert r.srcc == pytest.approx(expected)
    assert r.matched["a"].tolist() == pytest.approx([0.2, 0.4, 0.3, 0.6])
    # scoring failed trials as 0 keeps them, at the bottom of the ranking
    r0 = srcc_consistency(a, b, keys=["lr", "loss"], failed_as=0.0)
    assert r0.n == 5 and r0.srcc == pytest.approx(
        stats.spearmanr([0.2, 0.4, 0.3, 0.0, 0.6], [0.25, 0.35, 0.45, 0.55, 0.65]).statistic)
    # without keys the differing 'seed' prevents every match
    with pytest.raises(DataError, match="--keys"):
        srcc_consistency(a, b)
    with pytest.raises(DataError, match="'momentum' occurs in no configuration"):
        srcc_consistency(a, b, keys=["momentum"])
    with pytest.raises(ConfigError, match="agg"):
        srcc_consistency(a, b, keys=["lr"], agg="median")


# ---------------------------------------------------------------------------- one KGTuner run
def test_stage_consistency_matches_stage2_rows_to_their_stage1_source(tmp_path):
    rng = np.random.default_rng(3)
    space = load_space("decoupled", model="complex")
    s1 = [space.sample(rng) for _ in range(8)]
    s1_mrr = [0.10, 0.30, 0.25, 0.05, 0.40, 0.35, 0.20, 0.15]
    entries = [(c, m, "ok", 1) for c, m in zip(s1, s1_mrr)]
    top = np.argsort(s1_mrr)[::-1][:4]  # the 4 best are expanded
    best2 = {}
    for rank, i in enumerate(top):
        for dim in (1000, 2000):
            for batch in (512, 1024):
                mrr = 0.5 + 0.01 * rank + dim / 1e6 + batch / 1e7   # stage 2 reverses the stage-1 order
                entries.append(({**s1[i], "dim": dim, "batch_size": batch}, mrr, "ok", 2))
                best2[i] = max(best2.get(i, 0.0), mrr)
    # an unfinished stage-2 trial and a failed one are not counted
    entries.append(({**s1[top[0]], "dim": 4000, "batch_size": 512}, None, "stopped", 2))
    entries.append(({**s1[top[1]], "dim": 4000, "batch_size": 1024}, 0.99, "failed", 2))
    run = tmp_path / "run"
    trials_file(run / "trials.parquet", entries)
    res, per = stage_consistency(run, top_k=2)
    assert (res.n, res.only_a, res.only_b) == (4, 4, 0)
    assert res.srcc == pytest.approx(stats.spearmanr([s1_mrr[i] for i in top], [best2[i] for i in top]).statistic)
    assert res.srcc == pytest.approx(-1.0)
    assert res.top_k_overlap == 0.0
    assert len(per) == 4 and set(per.columns) == {"batch_size", "dim", "srcc", "n"}
    assert per["n"].tolist() == [4, 4, 4, 4] and per["srcc"].tolist() == pytest.approx([-1.0] * 4)
    only1 = trials_file(tmp_path / "one" / "trials.parquet", entries[:8])
    with pytest.raises(DataError, match="no stage-2 trials"):
        stage_consistency(only1)


# -------------------------------------------------------------------------------- importance
def test_importance_recovers_the_hyper_parameter_driving_mrr(tmp_path):
    rng = np.random.default_rng(0)
    space = load_space("decoupled", model="complex")
    entries = []
    for _ in range(60):
        c = space.sample(rng)
        mrr = 0.5 - 0.15 * abs(math.log10(c["lr"]) + 2.5) + rng.normal(0, 0.005)
        entries.append((c, mrr, "ok"))
    entries.append((space.sample(rng), 0.99, "failed"))  # ignored
    path = trials_file(tmp_path / "trials.parquet", entries)
    for sp in (None, "decoupled"):
        table = hp_importance(path, sp, n_estimators=60, n_repeats=5)
        assert table["hp"].iloc[0] == "lr"
        assert table.set_index("hp")["impurity"].idxmax() == "lr"
        lr = table.set_index("hp").loc["lr"]
        others = table[table["hp"] != "lr"]
        assert lr["permutation"] > 5 * others["permutation"].max()
        assert table["impurity"].sum() == pytest.approx(1.0) and table.attrs["n_trials"] == 60
        assert set(table["hp"]) >= {"loss", "negatives", "regularizer", "lr"}
    with pytest.raises(DataError, match="at least 5"):
        hp_importance(trials_file(tmp_path / "few.parquet", entries[:3]))


def test_importance_refuses_configs_outside_the_given_space(tmp_path):
    path = trials_file(tmp_path / "t.parquet", [(cfg(1e-3 * (i + 1), foo=i), 0.1 * i, "ok") for i in range(6)])
    with pytest.raises(ConfigError, match=r"\['foo'\] are not in space"):
        hp_importance(path, "decoupled", n_estimators=10, n_repeats=2)
    path = trials_file(tmp_path / "u.parquet", [(cfg(1e-3 * (i + 1), dim=4000), 0.1 * i, "ok") for i in range(6)])
    with pytest.raises(ConfigError, match="value 4000 of 'dim' is outside its domain"):
        hp_importance(path, "decoupled", n_estimators=10, n_repeats=2)
    # a whole two-stage run (stage-1 dim 100 / batch 128, stage-2 expansions) is encoded in one widened space
    path = trials_file(tmp_path / "v.parquet", [(cfg(1e-3 * (i + 1), dim=[100, 1000, 2000][i % 3],
                                                     batch_size=[128, 512, 1024][i % 3]), 0.1 * i, "ok")
                                                for i in range(6)])
    assert hp_importance(path, "decoupled", n_estimators=10, n_repeats=2).attrs["n_trials"] == 6


# ------------------------------------------------------------------------------------- CLI
def test_cli_tables_and_error_paths(tmp_path, capsys):
    lrs = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2]
    a = trials_file(tmp_path / "a.parquet", [(cfg(lr), 0.1 * i, "ok") for i, lr in enumerate(lrs)])
    b = trials_file(tmp_path / "b.parquet", [(cfg(lr, dim=500), 0.2 * i, "ok") for i, lr in enumerate(lrs)])
    assert cli_main(["srcc", str(a), str(b), "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    assert "SRCC 1.0000 over 6 matched" in out and "top-3" in out
    assert cli_main(["importance", str(a), "--trees", "10", "--repeats", "2"]) == 0
    assert "permutation" in capsys.readouterr().out

    assert cli_main(["srcc", str(a), str(tmp_path / "missing.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.parquet" in err and err.startswith("kgtuner: error:")
    frame = pd.read_parquet(a).drop(columns=["valid_mrr"])
    frame.to_parquet(tmp_path / "nometric.parquet")
    assert cli_main(["importance", str(tmp_path / "nometric.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nometric.parquet: missing column 'valid_mrr'" in err
    assert cli_main(["stages", str(tmp_path)]) == 2   # a folder without trials.parquet
    assert "has no trials.parquet" in capsys.readouterr().err


def test_cli_module_entry_point_exit_code(tmp_path):
    done = subprocess.run([sys.executable, "-m", "kgtuner.analysis", "stages", str(tmp_path / "nope")],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "nope: no such file" in done.stderr


def test_load_trials_rejects_non_parquet(tmp_path):
    bad = tmp_path / "trials.parquet"
    bad.write_text("not parquet")
    with pytest.raises(DataError, match="not a readable Parquet"):
        load_trials(tmp_path)


# ----------------------------------------------------------------------------- ablation core
def test_ablation_core_on_demo_graph_gives_finite_srcc():
    from kgtuner.analysis.ablation import (
        AblationPlan,
        run_subgraph_ablation,
        sample_configs,
        summarize_ablation,
    )
    from kgtuner.data import load_dataset

    kg = load_dataset("demo")
    configs = sample_configs(load_space("decoupled", model="complex", dataset="demo"), 3, seed=0)
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == 3
    plan = AblationPlan(settings=[("multi_rw", 0.3), ("pagerank", 0.3)], seeds=[0], full_seeds=[0, 1])
    runs, graphs = run_subgraph_ablation(kg, configs, plan=plan, jobs=1,
                                         controls={"max_steps": 30, "valid_every": 30, "dim": 16})
    assert len(runs) == 3 * (2 + 2) and (runs["steps"] <= 30).all()
    assert graphs.set_index("graph_key").loc["multi_rw:0.3:0", "entities"] == round(0.3 * 135)
    table, per_seed = summarize_ablation(runs, top_k=2)
    assert set(table["sampler"]) == {"full (reseeded)", "multi_rw", "pagerank"}
    assert np.isfinite(table["srcc"]).all() and (table["srcc"].abs() <= 1).all()
    assert np.isfinite(table["cost"]).all() and (table["cost"] > 0).all()
    assert (table["n"] == 3).all() and len(per_seed) == 3
    with pytest.raises(ConfigError, match="sampler='snowball'"):
        run_subgraph_ablation(kg, configs, plan=AblationPlan(settings=[("snowball", 0.2)]))


def test_trials_stopped_early_at_a_rung_are_not_ranked(tmp_path):
    lrs = [1e-4, 3e-4, 1e-3, 3e-3]
    a = trials_file(tmp_path / "a.parquet", [(cfg(lr), 0.1 * i, "ok") for i, lr in enumerate(lrs)])
    frame = pd.read_parquet(a)
    frame["rung"] = pd.array([None, None, None, 100], dtype="Int64")  # the last one: a partial score
    frame.loc[3, "status"] = "stopped"
    frame.to_parquet(tmp_path / "b.parquet", index=False)
    r = srcc_consistency(a, tmp_path / "b.parquet")
    assert (r.n, r.only_a, r.only_b) == (3, 1, 0)
