"""search.warm_start and search.points_to_evaluate through the strategies (no Ray): earlier runs' rows as prior
observations of the RF+BORE forests, known configurations first, one-line errors for bad sources."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from kgtuner.data import load_dataset
from kgtuner.errors import ConfigError
from kgtuner.paths import CONF_DIR
from kgtuner.tune.results import make_row, rows_to_frame
from kgtuner.tune.settings import ExperimentSettings

FAST = ["search.searcher.n_trees=30", "search.searcher.n_candidates=500"]


def _settings(*overrides) -> ExperimentSettings:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return ExperimentSettings.from_config(compose(config_name="config", overrides=list(overrides)))


def _earlier_run(tmp_path, space, graph: str, stage: int = 1, n: int = 60) -> str:
    """A trials.parquet of an earlier search on ``graph`` whose rows clearly favour loss=CE."""
    rng = np.random.default_rng(5)
    rows = []
    for i in range(n):
        cfg = space.sample(rng)
        good = cfg["loss"] == "CE"
        rows.append(make_row(f"old{i}", stage, cfg, status="ok", valid={"mrr": (0.5 if good else 0.1) + 0.01 * rng.random()},
                             graph=graph, trial_index=i))
    rows.append(make_row("oldfail", stage, space.sample(rng), status="failed", error="boom", graph=graph))
    run = tmp_path / "earlier"
    run.mkdir()
    rows_to_frame(rows).to_parquet(run / "trials.parquet")
    (run / "summary.json").write_text(json.dumps({"dataset": "demo", "model": "complex", "search": "rf_bore"}))
    return str(run)


def _first(strategy, n=4):
    space = strategy.space("demo")
    searcher = strategy.searcher(space, n)
    out = [searcher.suggest(f"t{i}") for i in range(n)]
    return [c for c in out if isinstance(c, dict)], strategy


def _one_stage(*overrides):
    s = _settings("search=rf_bore", "model=complex", *FAST, *overrides).make_strategy()
    s.prepare(load_dataset("demo"))
    return s


def test_a_warm_start_steers_the_first_suggestions_to_the_earlier_runs_best_region(tmp_path):
    probe = _one_stage()
    run = _earlier_run(tmp_path, probe.space("demo"), graph="demo")
    warm, strategy = _first(_one_stage(f"search.warm_start=[{run}]"))
    cold, _ = _first(_one_stage())
    assert [c["loss"] for c in warm] == ["CE"] * 4  # the forest acts from the first suggestion
    assert [c["loss"] for c in cold] != ["CE"] * 4  # cold: random initial suggestions
    summary = strategy.warm_summary()
    assert summary["sources"][0]["rows"] == 61 and summary["sources"][0]["search"] == "rf_bore"
    (group,) = summary["groups"]
    assert group["used"] == 61 and group["dropped"] == 0 and group["same_fidelity"] is True
    # rows of the same graph are this search's fidelity: none of them is proposed again
    earlier = {json.dumps(json.loads(c), sort_keys=True) for c in pd.read_parquet(f"{run}/trials.parquet").config_json}
    assert not any(json.dumps({k: v for k, v in c.items() if k not in ("stage", "trial_index")}, sort_keys=True)
                   in earlier for c in warm)


def test_kgtuner_gives_earlier_rows_to_both_stages_and_drops_rows_outside_the_space(tmp_path):
    strategy = _settings("search=kgtuner", "model=complex", *FAST).make_strategy()
    dec = strategy.space("demo")
    # an earlier KGTuner's stage-2 rows on the full graph (stage-2 sizes), and 5 rows with SGD: outside the space
    run = _earlier_run(tmp_path, dec.stage2_space(), graph="demo", stage=2)
    frame = pd.read_parquet(f"{run}/trials.parquet")
    odd = frame.head(5).copy()
    odd["trial_id"] = [f"sgd{i}" for i in range(5)]
    odd["config_json"] = [json.dumps({**json.loads(c), "optimizer": "SGD"}) for c in odd.config_json]
    pd.concat([frame, odd]).to_parquet(f"{run}/trials.parquet")
    strategy = _settings("search=kgtuner", "model=complex", *FAST, f"search.warm_start=[{run}]").make_strategy()
    strategy.prepare(load_dataset("demo"))
    first, _ = _first(strategy)
    report = {g["searcher"]: g for g in strategy.warm_summary()["groups"]}
    # rows outside the decoupled space are dropped and counted; the stage-2 sizes are free features in stage 1
    assert report["stage1"]["used"] == 61 and report["stage1"]["dropped"] == 5
    assert report["stage1"]["same_fidelity"] is False  # measured on the full graph, not the subgraph
    assert report["stage2"]["same_fidelity"] is True and report["stage2"]["used"] == report["stage1"]["used"]
    assert [c["loss"] for c in first] == ["CE"] * 4


def test_points_to_evaluate_run_first_and_take_stage1_sizes_under_kgtuner():
    point = {"negatives": 128, "loss": "BCE_adv", "adv_weight": 1.0, "regularizer": "DURA", "reg_weight": 1e-3,
             "dropout": 0.1, "optimizer": "Adam", "lr": 1e-3, "initializer": "xavier_uniform", "batch_size": 1024,
             "dim": 2000, "inverse": False}
    one = _one_stage(f"search.points_to_evaluate=[{json.dumps(point)}]".replace('"', ""))
    got, _ = _first(one, 2)
    assert {k: v for k, v in got[0].items() if k not in ("stage", "trial_index")} == \
        {**point, "batch_size": 1024, "dim": 2000} and got[1]["lr"] != point["lr"]
    kg = _settings("search=kgtuner", "model=complex", *FAST,
                   f"search.points_to_evaluate=[{json.dumps(point)}]".replace('"', "")).make_strategy()
    kg.prepare(load_dataset("demo"))
    first, _ = _first(kg, 1)
    assert first[0]["lr"] == point["lr"] and first[0]["batch_size"] == 128 and first[0]["dim"] == 100


@pytest.mark.parametrize("overrides, message", [
    (["search=rf_bore", "search.warm_start=[/nonexistent/run]"], r"search.warm_start\[0\]: /nonexistent/run does not exist; give an earlier run directory"),
    (["search=random", "search.warm_start=[/tmp]"], r"search.warm_start works with the RF\+BORE searches .*not search=random"),
    (["search=rf_bore", "search.points_to_evaluate=3"], r"search.points_to_evaluate must be a list"),
])
def test_bad_warm_start_or_points_are_one_clear_error(overrides, message):
    with pytest.raises(ConfigError, match=message):
        _settings(*overrides)


def test_an_unreadable_source_names_the_file(tmp_path):
    bad = tmp_path / "trials.parquet"
    bad.write_text("not parquet")
    with pytest.raises(ConfigError, match=rf"search.warm_start\[0\]: {bad} is not a readable trials.parquet"):
        _settings("search=rf_bore", f"search.warm_start=[{tmp_path}]")


def test_a_bad_point_is_refused_before_ray_starts():
    with pytest.raises(ConfigError, match=r"search.points_to_evaluate\[0\]: 'lrr' is not a hyper-parameter .*'lr'"):
        _settings("search=kgtuner", "search.points_to_evaluate=[{lrr: 0.1}]")
    with pytest.raises(ConfigError, match=r"search.points_to_evaluate\[0\]: optimizer='SGD' is outside its domain"):
        _settings("search=kgtuner", "search.points_to_evaluate=[{optimizer: SGD}]")


@pytest.mark.parametrize("search", ["kgtuner", "random", "rf_bore"])
def test_the_papers_wn18rr_complex_configuration_is_a_known_preset(search, monkeypatch):
    """``+known=paper_wn18rr_complex``: the paper's appendix table (WN18RR, ComplEx) as search.points_to_evaluate,
    valid against every space it is run in (KGTuner's decoupled one at stage-1 sizes, the baselines' full one)."""
    monkeypatch.setenv("KGTUNER_DATA_ROOT", "/nonexistent")  # composing and validating reads no data
    s = _settings("+experiment=wn18rr_complex", "+known=paper_wn18rr_complex", f"search={search}")
    (point,) = s.search["points_to_evaluate"]
    assert point == {"negatives": 32, "loss": "BCE_mean", "regularizer": "NUC", "reg_weight": 1.21e-3,
                     "dropout": 0.28, "optimizer": "Adam", "lr": 6.08e-4, "initializer": "xavier_uniform",
                     "batch_size": 1024, "dim": 2000, "inverse": False}


# ------------------------------------------------------------------ issue 42: bad rows and repeated sources
def test_a_stage_that_is_not_a_number_is_one_line_naming_the_file_and_row(tmp_path):
    from kgtuner.search import load_space

    run = _earlier_run(tmp_path, load_space("full", model="complex", dataset="demo"), graph="demo", n=8)
    frame = pd.read_parquet(f"{run}/trials.parquet")
    frame["stage"] = frame["stage"].astype(float)
    frame.loc[3, "stage"] = float("nan")
    frame.to_parquet(f"{run}/trials.parquet")
    with pytest.raises(ConfigError) as err:
        _settings("search=rf_bore", f"search.warm_start=[{run}]")
    text = str(err.value)
    assert "\n" not in text and f"{run}/trials.parquet" in text and "row 3" in text and "stage" in text, text
    assert "trial old3" in text


def _copy_run(src: str, dst) -> str:
    import shutil

    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dst)
    return str(dst)


def test_a_source_listed_twice_is_read_once_with_a_warning(tmp_path):
    from kgtuner.search import load_space
    from kgtuner.tune.warm_start import RepeatedSourceWarning, load_sources

    run = _earlier_run(tmp_path, load_space("full", model="complex", dataset="demo"), graph="demo", n=10)
    # the same run three times: as given, as its trials.parquet, through another spelling of its path
    other = str(tmp_path / "earlier" / ".." / "earlier")
    with pytest.warns(RepeatedSourceWarning, match=r"search.warm_start\[0\] .* listed again as \[1\], \[2\]") as seen:
        groups, infos = load_sources([run, f"{run}/trials.parquet", other])
    assert len(seen) == 1 and all("\n" not in str(w.message) for w in seen)
    assert len(groups) == 1 and len(groups[0].rows) == 11
    assert len(infos) == 1 and infos[0]["rows"] == 11
    # a copy of a run elsewhere is the same run (the same trials.parquet, byte for byte)
    copy = _copy_run(run, tmp_path / "backup" / "earlier")
    with pytest.warns(RepeatedSourceWarning, match="the same rows"):
        groups, _ = load_sources([run, copy])
    assert len(groups) == 1 and len(groups[0].rows) == 11


def test_two_runs_in_folders_of_one_name_are_two_groups_named_apart(tmp_path):
    from kgtuner.search import load_space
    from kgtuner.tune.warm_start import load_sources

    space = load_space("full", model="complex", dataset="demo")
    first = _earlier_run(tmp_path, space, graph="demo", n=10)
    a = _copy_run(first, tmp_path / "a" / "base1")
    b = tmp_path / "b" / "base1"
    b.mkdir(parents=True)
    frame = pd.read_parquet(f"{first}/trials.parquet")
    frame.head(4).to_parquet(b / "trials.parquet")  # another run: other rows
    groups, infos = load_sources([a, str(b)])
    assert [len(g.rows) for g in groups] == [11, 4]
    assert len({g.group for g in groups}) == 2  # labelled apart: each among its own rows
    assert [g.source for g in groups] == ["a/base1", "b/base1"] and [i["label"] for i in infos] == ["a/base1", "b/base1"]
    # a folder name no other source has stays the group's name
    groups, infos = load_sources([str(b), first])
    assert [g.source for g in groups] == ["base1", "earlier"]
    # through a strategy: summary.json's report names both groups and both sources
    strategy = _one_stage(f"search.warm_start=[{a},{b}]")
    _first(strategy, 1)
    summary = strategy.warm_summary()
    assert [s["label"] for s in summary["sources"]] == ["a/base1", "b/base1"]
    assert [(g["source"], g["rows"]) for g in summary["groups"]] == [("a/base1", 11), ("b/base1", 4)]
