"""Issue 38's replay side: the priced clock, the one-stage arms over KGTuner's own space (the decoupled pool), training
noise drawn among a configuration's recorded seeds, explored stage-2 suggestions as misses, exhausted cells, the
searcher's share of the budget, and the ``fair`` study."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from kgtuner.bench.benchmark import (ALGORITHMS, STUDIES, algorithm_label, algorithm_pool, budget_seconds,
                                     mean_trial_seconds, parse_algorithm, results_frame, run_cell, strategy_for)
from kgtuner.bench.compare import exhausted_cells, mark_exhausted, summarize
from kgtuner.bench.replay import ReplayTable, hp_key, replay
from kgtuner.errors import ConfigError
from kgtuner.search import load_space
from replay_helpers import FOREST, KGTUNER, SIZES, _frames, _strategy, _table


def _same_search(row):
    return {k: v for k, v in row.items() if k not in ("wall_s", "searcher_s")}


# ------------------------------------------------------------------------------------------ the priced clock
def test_a_priced_table_replays_on_its_priced_cost_whatever_the_measured_seconds():
    a, b = _table(scramble=1), _table(scramble=2)
    assert a.priced and b.priced
    runs = _frames(scramble=1)[0]
    main_full = runs[(runs.pool == "full") & (runs.seed == 0)]
    assert mean_trial_seconds(a) == pytest.approx(main_full["cost"].mean()) == mean_trial_seconds(b)
    assert main_full["cost"].mean() != pytest.approx(main_full["seconds_total"].mean())
    for algorithm in (KGTUNER, "random"):
        rows = [_same_search(run_cell(t, algorithm, 2, 3.0, 0)) for t in (a, b)]
        assert rows[0] == rows[1], algorithm  # the measured seconds (scrambled differently) play no part
    # a trial costs its run's priced cost: 4 validations of 20 (full pool), none of the measured seconds
    res = replay(_strategy("search=random", "budget=trials", "budget.trials=6"), a, workers=2)
    assert [r["end_s"] - r["start_s"] for r in res.rows] == pytest.approx([80.0] * 6)
    # the instrument: the same two tables without their prices replay on the measured seconds, which differ
    unpriced = []
    for scramble in (1, 2):
        runs, curves = _frames(scramble=scramble)
        table = ReplayTable(runs.drop(columns="cost"), curves.drop(columns="cost"), graph="demo", source="x")
        assert not table.priced
        unpriced.append(_same_search(run_cell(table, "random", 2, 3.0, 0)))
    assert unpriced[0] != unpriced[1]


def test_a_priced_table_folder_is_read_with_its_costs_and_an_epoch_cadence_is_not_taken_for_steps(tmp_path):
    runs, curves = _frames(scramble=1)
    runs.to_parquet(tmp_path / "runs.parquet", index=False)
    curves.to_parquet(tmp_path / "curves.parquet", index=False)
    (tmp_path / "card.json").write_text(json.dumps({"graph": "demo", "settings": {
        "model": "complex", "valid_unit": "epochs", "full_valid_every": 1, "expand_valid_every": 1}}))
    table = ReplayTable.load(tmp_path)
    assert table.priced and table.valid_every == {}  # an interval in epochs is no interval in steps
    assert table.runs["full"][0].total_s == pytest.approx(80.0) and table.has("decoupled")
    # a table whose curves carry costs for some runs only is refused, not replayed on two clocks
    curves.loc[curves.run_id == curves.run_id.iloc[0], "cost"] = None
    with pytest.raises(ConfigError, match="without a priced cost"):
        ReplayTable(runs, curves, graph="demo")


# ------------------------------------------------------------------------------------------ training noise
def test_a_priced_trial_trains_a_seed_drawn_by_the_search_seed_and_its_index():
    noisy = lambda pool, i: pool == "full" and i % 2 == 0  # noqa: E731
    table = _table(noisy=noisy, scramble=1)

    def strategy(seed):
        return _strategy("search=random", "budget=trials", "budget.trials=20", f"seed={seed}")

    res = replay(strategy(0), table, workers=2)
    again = replay(strategy(0), table, workers=2)
    assert res.rows == again.rows  # exactly reproducible
    by_run = {r.run_id: r for runs in table.seeds["full"].values() for r in runs.values()}
    for row in res.rows:
        key = int(row["run_id"].split("-")[1])
        if noisy("full", key):
            want = sorted(table.seeds["full"][key])[int(np.random.default_rng([0, row["trial_index"]]).integers(3))]
            assert row["run_seed"] == want and row["run_seeds"] == "0,1,2"
        else:
            assert row["run_seed"] == 0 and row["run_seeds"] == "0"
        run = by_run[row["run_id"]]
        assert run.seed == row["run_seed"] and row["test_mrr"] == pytest.approx(run.test["mrr"])
    assert {r["run_seed"] for r in res.rows} >= {0, 1, 2}  # the noise runs are trained, not only the main ones
    # the results row: the answer's drawn seed and that run's test MRR (test_mrr_drawn), its configuration's recorded
    # seeds, and its score: the mean test MRR over them (kgtuner.bench.answer_score)
    rows = [run_cell(table, "random", 2, 10.0, s) for s in range(4)]
    for row in rows:
        assert row["answer_seeds"] in ("0", "0,1,2") and row["answer_seed"] in (0, 1, 2)
        answer = by_run[row["answer_run"]]
        assert answer.seed == row["answer_seed"] and row["test_mrr_drawn"] == pytest.approx(answer.test["mrr"])
        assert row["answer_score"] == "seeds_mean"
        seeds = table.seeds["full"][int(row["answer_run"].split("-")[1])]
        assert row["test_mrr"] == pytest.approx(np.mean([r.test["mrr"] for r in seeds.values()]))
    noisy_answers = [r for r in rows if r["answer_seeds"] == "0,1,2"]
    assert noisy_answers  # the best configurations are the noisy ones here (better by 0.02 a seed)
    # seeds 0, 1, 2 score 0.02 apart: the mean is seed 1's, whichever seed the answer's trial drew
    assert all(r["test_mrr"] == pytest.approx(by_run[r["answer_run"]].test["mrr"] + 0.02 * (1 - r["answer_seed"]))
               for r in noisy_answers)
    # an unpriced (older) table keeps seed 0, noise runs recorded or not
    runs, curves = _frames(noisy=noisy, priced=False)
    old = ReplayTable(runs, curves, graph="demo")
    assert len(old.seeds["full"][0]) == 3
    assert {r["run_seed"] for r in replay(strategy(0), old, workers=2).rows} == {0}


# ------------------------------------------------------------------------------------------ KGTuner's space
@pytest.mark.parametrize("algorithm", ["random[space=decoupled]", f"rf_bore[space=decoupled,{FOREST}]",
                                       "tpe[space=decoupled]"])
def test_a_one_stage_arm_over_kgtuners_space_trains_only_decoupled_runs(algorithm):
    table = _table(scramble=1)
    strategy = strategy_for(algorithm, table, budget_seconds(table, 30.0, 2), 0)
    res = replay(strategy, table, workers=2, pool=algorithm_pool(algorithm))
    assert len(res.rows) >= 8 and {r["pool"] for r in res.rows} == {"decoupled"}
    assert all(r["run_id"].startswith("decoupled-") for r in res.rows)
    # it searches the stage-1 space's hyper-parameters with batch_size / dim among the expansion's sizes
    s1 = load_space("decoupled", model="complex", dataset="demo")
    for s in res.suggestions:
        assert (s["config"]["batch_size"], s["config"]["dim"]) in SIZES
        assert s1.contains({**s["config"], "batch_size": 128, "dim": 100})
    assert len({(s["config"]["batch_size"], s["config"]["dim"]) for s in res.suggestions}) > 1
    row = run_cell(table, algorithm, 2, 30.0, 0)
    assert row["algorithm"] == algorithm_label(algorithm) and str(row["answer_run"]).startswith("decoupled-")


def test_a_decoupled_arm_is_refused_on_a_table_without_the_pool_and_named_only_for_one_stage_searches():
    runs, curves = _frames()
    old = ReplayTable(runs[runs.pool != "decoupled"], curves, graph="demo", source="tables/old-demo")
    with pytest.raises(ConfigError, match=r"random\[space=decoupled\].*tables/old-demo.*no decoupled pool"):
        strategy_for("random[space=decoupled]", old, 100.0, 0)
    with pytest.raises(ConfigError, match="tables/old-demo.*no decoupled pool"):
        replay(_strategy("search=random", "budget=trials", "budget.trials=2"), old, workers=1, pool="decoupled")
    label = algorithm_label("rf_bore[space=decoupled, searcher.gamma=0.3]")
    assert label == "rf_bore[searcher.gamma=0.3,space=decoupled]"
    assert algorithm_pool("random[space=decoupled]") == "decoupled" and algorithm_pool("random") == "full"
    assert parse_algorithm("random[space=decoupled]") == ("random", ["search.space=decoupled"], None)
    for bad in ("kgtuner[space=decoupled]", "random[space=full]", "random[space=shrunk]"):
        with pytest.raises(ConfigError, match="space="):
            parse_algorithm(bad)


# ------------------------------------------------------------------------------------------ misses, exhaustion
def test_a_stage2_suggestion_explored_beyond_the_candidates_is_a_miss():
    """Every stage-1 configuration expanded (no candidate can miss) and top_k=1: stage 2 has 4 candidates, then
    explores the space; each explored suggestion has no recorded run (a priced table's replay counts it)."""
    table = _table(expand_top=40, scramble=1)
    args = ("search=kgtuner", "search.top_k=1", "budget=trials", "budget.trials=20")
    res = replay(_strategy(*args), table, workers=1)
    stage1 = {hp_key(s["config"]) for s in res.suggestions if s["stage"] == 1}
    explored = [s for s in res.suggestions if s["stage"] == 2 and hp_key(s["config"]) not in stage1]
    assert len(explored) >= 2  # what this test is about
    assert res.misses == len(explored)
    lost = replay(_strategy(*args), table, workers=1, on_miss="lose")
    failed = [r for r in lost.rows if r["stage"] == 2 and r["status"] == "failed"]
    assert lost.misses > 0 and len(failed) == lost.misses and all(r["run_id"] is None for r in failed)
    with pytest.raises(ConfigError, match="explored beyond the candidates"):
        replay(_strategy(*args), table, workers=1, on_miss="fail")
    # an older (unpriced) table's replays stay what they were: an explored suggestion maps to the nearest expansion,
    # uncounted
    runs, curves = _frames(expand_top=40, priced=False)
    old = ReplayTable(runs, curves, graph="demo")
    assert replay(_strategy(*args), old, workers=1).misses == 0


def test_a_cell_whose_search_used_up_its_pool_is_marked_exhausted():
    table = _table(nfull=4, scramble=1)  # 4 full-graph runs: a 10-trial search repeats them
    rows = [run_cell(table, "random", 1, 10.0, s) for s in range(2)] + \
           [run_cell(table, "random[space=decoupled]", 1, 10.0, s) for s in range(2)]
    assert all(r["repeats"] > 0 for r in rows[:2]) and all(r["repeats"] == 0 for r in rows[2:])
    df = results_frame(rows)
    marked = mark_exhausted(df).set_index(["algorithm", "seed"])["exhausted"]
    assert marked["random"].all() and not marked["random[space=decoupled]"].any()
    cells = exhausted_cells(df)
    assert cells[["algorithm", "workers", "budget_trials", "searches"]].values.tolist() == [["random", 1, 10.0, 2]]
    # one search with repeats marks its whole cell; cells of other budgets or workers are not touched
    synth = pd.DataFrame([{"graph": "g", "algorithm": "a", "workers": w, "budget_trials": b, "seed": s,
                           "repeats": int(w == 1 and b == 10.0 and s == 2)}
                          for w in (1, 8) for b in (10.0, 30.0) for s in range(3)])
    flagged = mark_exhausted(synth)
    assert flagged[flagged.exhausted][["workers", "budget_trials"]].drop_duplicates().values.tolist() == [[1, 10.0]]
    assert len(flagged[flagged.exhausted]) == 3 and exhausted_cells(synth)["exhausted_searches"].tolist() == [1]
    assert exhausted_cells(synth.assign(repeats=0)).empty
    summary = summarize(df).set_index("algorithm")
    assert summary.loc["random", "exhausted"] and not summary.loc["random[space=decoupled]", "exhausted"]


def test_the_results_carry_the_searchers_share_of_the_budget():
    table = _table(scramble=1)
    rows = [run_cell(table, "random", 2, 3.0, s) for s in range(2)]
    df = results_frame(rows)
    assert np.allclose(df["searcher_share"], df["searcher_s"] / df["budget_s"]) and (df["searcher_share"] > 0).all()
    assert "searcher_share" not in rows[0]  # a timing: derived for the results, not journaled (a replay repeats)


def test_the_fair_study_adds_the_miss_bracket_and_the_decoupled_arms_to_main():
    fair = STUDIES["fair"]
    assert fair.algorithms == ALGORITHMS + ("kgtuner[on_miss=lose]", "kgtuner_asha[on_miss=lose]",
                                            "random[space=decoupled]", "rf_bore[space=decoupled]")
    assert fair.algorithms[:len(ALGORITHMS)] == STUDIES["main"].algorithms
    assert (fair.workers, fair.budgets, fair.seeds, fair.on_miss) == ((1, 8), (10.0, 30.0, 100.0), 30, "nearest")
    labels = [algorithm_label(a) for a in fair.algorithms]
    assert len(set(labels)) == len(labels) and "random[space=decoupled]" in labels


@pytest.mark.slow
def test_a_tiny_calibrated_recording_replays_priced_with_its_noise_seeds_and_decoupled_pool(tmp_path):
    """End to end: `kgtuner bench record` (calibrated, every pool, noise seeds in the full-graph pools), its table,
    and the replay of the decoupled arm on it."""
    from kgtuner.bench import pool as bp
    from kgtuner.bench import record as br
    from kgtuner.bench.table import finalize

    settings = bp.RecordSettings(
        dataset="demo", stage1_configs=4, full_configs=2, decoupled_configs=2, expand_top=1, max_epochs=3,
        stage1_cap_s=2.0, expand_cap_s=0.5, full_cap_s=0.5, decoupled_cap_s=0.5, noise_stage1_top=0,
        noise_stage1_random=0, noise_expand_top=0, noise_full_top=1, noise_full_random=0, noise_full_seeds=2,
        noise_decoupled_top=1, noise_decoupled_random=0, noise_decoupled_seeds=2)
    br.record(settings, tmp_path / "journal", command="test", log=lambda line: None)
    finalize(tmp_path / "journal", tmp_path / "table")
    table = ReplayTable.load(tmp_path / "table")
    assert table.priced and table.has("decoupled") and table.valid_every == {}  # validations every epoch
    runs = pd.read_parquet(tmp_path / "table" / "runs.parquet")
    main_full = runs[(runs.pool == "full") & (runs.seed == 0)]
    assert mean_trial_seconds(table) == pytest.approx(main_full["cost"].mean())
    assert [sorted(s) for s in table.seeds["decoupled"].values()].count([0, 1]) == 1
    row = run_cell(table, "random[space=decoupled]", 1, 3.0, 0)
    assert str(row["answer_run"]).startswith("decoupled-") and row["answer_seeds"] in ("0", "0,1")


def test_the_fair_grid_charges_the_searcher_and_keeps_charged_rows_apart():
    from kgtuner.bench.benchmark import results_frame

    assert STUDIES["fair"].charge_searcher and STUDIES["fair"].to_dict()["charge_searcher"] is True
    # the grids fixed before the setting keep their journal header (no new key), so they resume as they were
    assert all("charge_searcher" not in STUDIES[name].to_dict() for name in ("main", "defaults", "miss_bracket"))
    row = {"graph": "g", "workers": 8, "budget_trials": 10.0, "algorithm": "kgtuner", "seed": 0, "valid_mrr": 0.3,
           "test_mrr": 0.29, "searcher_s": 1.0, "budget_s": 10.0}
    both = results_frame([{**row, "searcher_charged": False}, {**row, "valid_mrr": 0.28, "searcher_charged": True}])
    assert len(both) == 2 and sorted(both["searcher_charged"]) == [False, True]
    plain = results_frame([{**row, "searcher_charged": False}])
    assert "searcher_charged" not in plain.columns  # an uncharged grid's results.parquet keeps its columns
