"""The search benchmark's bookkeeping (scripts/benchmarks/bench_search.py): curves, ranks, time to reach, cell plans."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from script_loader import load_script

REPO = Path(__file__).resolve().parents[1]




@pytest.fixture(scope="module")
def bench():
    return load_script("bench_search")


def _trials(rows):
    cols = ["stage", "status", "valid_mrr", "end_s", "rung"]
    return pd.DataFrame(rows, columns=cols)


def test_curve_counts_only_answer_eligible_trials(bench):
    trials = _trials([
        (1, "ok", 0.99, 1.0, None),       # stage 1: subgraph MRR, not comparable
        (2, "ok", 0.40, 6.0, None),
        (2, "failed", None, 7.0, None),
        (2, "stopped", 0.90, 8.0, 100.0),  # stopped early by ASHA: never an answer
        (2, "ok", 0.35, 9.0, None),        # worse: no new point
        (2, "stopped", 0.55, 10.0, None),  # stopped by the budget: counts
    ])
    pts = bench.curve_points(trials, stage=2)
    assert pts["t"].tolist() == [6.0, 10.0]
    assert pts["best_valid_mrr"].tolist() == [0.40, 0.55]


def test_final_stage_per_search(bench):
    t = _trials([(1, "ok", 0.1, 1.0, None), (3, "ok", 0.2, 2.0, None)])
    assert bench.final_stage({"search": "kgtuner", "two_stage": True}, t) == 2
    assert bench.final_stage({"search": "random", "two_stage": False}, t) == 1
    assert bench.final_stage({"search": "grash", "rounds": [{}, {}, {}, {}]}, t) == 4
    assert bench.final_stage({"search": "grash"}, t) == 3


def _results(values):
    rows = []
    for (dataset, seed), per_algo in values.items():
        for algo, v in per_algo.items():
            rows.append(dict(dataset=dataset, model="complex", algorithm=algo, seed=seed, budget_s=10.0,
                             valid_mrr=v, test_mrr=v, trials=3, error=None))
    return pd.DataFrame(rows)


def test_mean_ranks_ties_missing_and_incomplete_blocks(bench):
    res = _results({
        ("a", 0): {"x": 0.5, "y": 0.4, "z": 0.4},
        ("a", 1): {"x": np.nan, "y": 0.4, "z": 0.3},   # x failed: ranks last
        ("b", 0): {"x": 0.9, "y": 0.1},                # z missing: block left out
    })
    ranks = bench.mean_ranks(res, "valid_mrr")
    assert ranks["x"] == pytest.approx((1 + 3) / 2)
    assert ranks["y"] == pytest.approx((2.5 + 1) / 2)
    assert ranks["z"] == pytest.approx((2.5 + 2) / 2)


def test_time_to_reach_reference(bench):
    res = _results({("a", 0): {"random": 0.5, "kgtuner": 0.6, "tpe": 0.45}})
    curves = pd.DataFrame([
        ("a", "complex", "random", 0, 2.0, 0.3), ("a", "complex", "random", 0, 8.0, 0.5),
        ("a", "complex", "kgtuner", 0, 5.0, 0.55), ("a", "complex", "kgtuner", 0, 9.0, 0.6),
        ("a", "complex", "tpe", 0, 1.0, 0.45),
    ], columns=["dataset", "model", "algorithm", "seed", "t", "best_valid_mrr"])
    reach = bench.time_to_reach(curves, res).set_index("algorithm")
    assert reach.loc["random", "t_reach"] == 8.0 and reach.loc["random", "frac_budget"] == pytest.approx(0.8)
    assert reach.loc["kgtuner", "t_reach"] == 5.0
    assert np.isnan(reach.loc["tpe", "t_reach"])


def test_mean_curve_waits_for_every_seed(bench):
    curves = pd.DataFrame([(0, 1.0, 0.2), (0, 3.0, 0.4), (1, 2.0, 0.6)], columns=["seed", "t", "best_valid_mrr"])
    y, n = bench.mean_curve(curves, np.array([0.5, 1.5, 2.5, 3.5]))
    assert n == 2
    assert np.isnan(y[0]) and np.isnan(y[1])
    assert y[2] == pytest.approx(0.4) and y[3] == pytest.approx(0.5)


def test_plan_skips_finished_cells_and_checks_inputs(bench, tmp_path):
    data = tmp_path / "data"
    (data / "tiny").mkdir(parents=True)
    out = tmp_path / "out"
    cells = bench.plan_cells(["tiny"], ["complex"], ["kgtuner", "random"], [0, 1], out, data, 0.5)
    assert len(cells) == 4
    done = Path(cells[0]["run_dir"])
    done.mkdir(parents=True)
    (done / "cell.json").write_text(json.dumps({"error": None}))
    failed = Path(cells[1]["run_dir"])
    failed.mkdir(parents=True)
    (failed / "cell.json").write_text(json.dumps({"error": "RayTaskError: boom"}))  # runs again
    again = bench.plan_cells(["tiny"], ["complex"], ["kgtuner", "random"], [0, 1], out, data, 0.5)
    assert len(again) == 3 and all(c["run_dir"] != str(done) for c in again)
    assert "budget.seconds=30" in cells[0]["overrides"]  # 60 s default x 0.5
    with pytest.raises(SystemExit, match="unknown algorithm"):
        bench.plan_cells(["tiny"], ["complex"], ["hyperband"], [0], out, data, 1.0)
    with pytest.raises(SystemExit, match="not found"):
        bench.plan_cells(["nope"], ["complex"], ["random"], [0], out, data, 1.0)


def test_every_algorithm_composes_to_valid_settings(bench, tmp_path):
    """Each algorithm's overrides compose with the launcher's config and validate (no Ray)."""
    from hydra import compose, initialize_config_dir

    from kgtuner.paths import CONF_DIR
    from kgtuner.tune.settings import ExperimentSettings

    (tmp_path / "tiny").mkdir()
    for algo in bench.ALGORITHMS:
        overrides = bench.cell_overrides("tiny", "complex", algo, 0, 20.0, tmp_path)
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        s = ExperimentSettings.from_config(cfg)
        assert s.budget.seconds == 20.0 and s.model_name == "complex"


def test_large_suite_cells_run_two_trials_in_flight_with_per_dataset_controls(bench, tmp_path):
    """The large suite (issue 17): its budgets, 2 CPUs per search, per-dataset full-graph steps, one cell at a time."""
    from hydra import compose, initialize_config_dir

    from kgtuner.paths import CONF_DIR
    from kgtuner.tune.settings import ExperimentSettings

    suite = bench.SUITES["large"]
    assert suite["jobs"] == 1
    for name in ("codex-m", "wn18rr"):
        (tmp_path / name).mkdir()
    cells = bench.plan_cells(["codex-m", "wn18rr"], ["complex"], ["kgtuner", "random"], [0], tmp_path / "out",
                             tmp_path, 1.0, suite)
    by = {(c["dataset"], c["algorithm"]): c for c in cells}
    assert by["codex-m", "kgtuner"]["budget_s"] == bench.LARGE_BUDGETS["codex-m"]
    assert by["wn18rr", "random"]["budget_s"] == bench.LARGE_BUDGETS["wn18rr"]
    for (dataset, _), cell in by.items():
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=cell["overrides"])
        s = ExperimentSettings.from_config(cfg)
        assert cfg.cluster.num_cpus == 2
        assert cfg.trial.stage2.max_steps == bench.LARGE_STAGE2_STEPS[dataset]
        assert s.budget.seconds == bench.LARGE_BUDGETS[dataset]
    # the main suite keeps its one-core cells
    main = bench.cell_overrides("codex-m", "complex", "random", 0, 20.0, tmp_path)
    assert "cluster.num_cpus=1" in main and "trial.stage2.max_steps=300" in main


def committed(folder: Path, name: str) -> list[Path]:
    """The files called ``name`` under ``folder`` that git tracks (every one where this is no git checkout): what
    a fresh clone holds, not what a running benchmark is writing beside it."""
    proc = subprocess.run(["git", "ls-files", "-z", "--", str(folder)], cwd=REPO, capture_output=True)
    if proc.returncode != 0:
        return sorted(folder.rglob(name))
    return sorted(REPO / f for f in proc.stdout.decode().split("\0") if f and Path(f).name == name)


@pytest.fixture(scope="module")
def page():
    return load_script("benchmarks_page")


def _cell(out: Path, dataset: str, algorithm: str, seed: int, *, valid: float, config: dict, load: float,
          two_stage: bool = False, trials: list | None = None, summary: dict | None = None) -> Path:
    """A finished cell of scripts/benchmarks/bench_search.py: cell.json, summary.json, trials.parquet."""
    run = out / "cells" / f"{dataset}__complex__{algorithm}__s{seed}"
    run.mkdir(parents=True)
    (run / "cell.json").write_text(json.dumps({"dataset": dataset, "model": "complex", "algorithm": algorithm,
                                               "seed": seed, "budget_s": 100.0, "wall_s": 120.0, "error": None,
                                               "loadavg": [load, 1.0, 1.0]}))
    (run / "summary.json").write_text(json.dumps({
        "search": algorithm, "two_stage": two_stage, **(summary or {}),
        "best": {"valid": {"mrr": valid}, "test": {"mrr": valid - 0.01, "hits@10": 0.5}, "config": config,
                 "from_subgraph": False}}))
    stage = 2 if two_stage else 1
    rows = trials or [(stage, "ok", valid / 2, 30.0, None), (stage, "ok", valid, 80.0, None)]
    pd.DataFrame(rows, columns=["stage", "status", "valid_mrr", "end_s", "rung"]).to_parquet(run / "trials.parquet")
    return run


def _graph(root: Path, name: str, entities: int) -> None:
    (root / name).mkdir(parents=True)
    lines = "\n".join(f"e{i}\tr\te{(i + 1) % entities}" for i in range(entities)) + "\n"
    for split in ("train", "valid", "test"):
        (root / name / f"{split}.txt").write_text(lines)


def test_collect_then_render_puts_every_figure_in_a_committed_file(page, tmp_path):
    """`--collect` turns a live suite's output folder into docs/benchmarks/ files (results, curves, per-search facts,
    provenance); the page then renders from those alone: the same page after the outputs are gone."""
    out, data = tmp_path / "outputs" / "large", tmp_path / "datasets"
    _graph(data, "g", 50)
    kg_trials = [(1, "ok", 0.5, 10.0, None), (1, "ok", 0.6, 20.0, None), (1, "failed", None, 25.0, None),
                 (2, "ok", 0.3, 60.0, None), (2, "stopped", 0.2, 90.0, None)]
    for seed, (k, r) in enumerate([(0.30, 0.20), (0.32, 0.25), (0.28, 0.29)]):
        _cell(out, "g", "kgtuner", seed, valid=k, config={"inverse": False, "optimizer": "Adam"}, load=2.0 + seed,
              two_stage=True, trials=kg_trials, summary={"budget": {"seconds": 100.0, "switch_wait_s": 2.5},
                                                         "stage2_started_s": 52.0})
        _cell(out, "g", "random", seed, valid=r, config={"inverse": seed == 0, "optimizer": "Adagrad"}, load=4.0)
    docs_page, readme = tmp_path / "docs" / "benchmarks.md", tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n\n{page.README_BEGIN}\nold text\n{page.README_END}\n\nafter\n")
    args = ["--page", str(docs_page), "--readme", str(readme), "--replay", str(tmp_path / "no_replay"),
            "--tables", str(tmp_path / "no_tables")]
    none = str(tmp_path / "none")
    assert page.main(["--collect", "--large", str(out), "--main", none, "--ablation", none, "--srcc", none,
                      "--large-srcc", none, "--data-root", str(data), *args]) == 0
    docs = tmp_path / "docs" / "benchmarks"
    assert {p.name for p in docs.iterdir()} == {"large_results.parquet", "large_curves.parquet",
                                                "large_searches.parquet", "large_search_curves.png", "provenance.json"}
    prov = json.loads((docs / "provenance.json").read_text())
    assert prov["large"]["command"] == f"python scripts/benchmarks/bench_search.py --suite large --out {out}"
    assert any("2 trials in flight" in line for line in prov["large"]["scale"])
    searches = pd.read_parquet(docs / "large_searches.parquet")
    k0 = searches[(searches["algorithm"] == "kgtuner") & (searches["seed"] == "0")].iloc[0]
    assert (k0.stage1_trials, k0.stage2_trials, k0.stage2_finished) == (3, 2, 1) and k0.entities == 50
    assert k0.stage2_start == pytest.approx(0.52) and k0.best_stage1 == pytest.approx(0.6)
    text = docs_page.read_text()
    assert "1-minute load average as each search ended: median 4.0, max 4.0" in text
    assert "| g / kgtuner | 3.0 | 2.0 (1.0) | 0.52 B | 2.5 s | 0.600 | 0.300 | 0 of 3 |" in text
    # the why-table: random's answers outside KGTuner's shrunk space (1 with inverse relations, 3 not Adam)
    assert "| g / complex | 0.300 | random 0.247 | 10 of 50 entities | - | 1 of 3 | 3 of 3 |" in text
    # the paired test: KGTuner minus random per seed = +0.10, +0.07, -0.01 (validation)
    assert "| random | 3 | +0.053 [" in text and "| 2/3 |" in text
    assert "TPE" not in text  # it did not run: no statement names it
    block = readme.read_text()
    assert block.startswith("# x\n\nbefore\n\n") and block.endswith("\n\nafter\n") and "old text" not in block
    assert "KGTuner minus random search, test MRR +0.053" in text  # in the page's summary, not the README
    import shutil

    shutil.rmtree(tmp_path / "outputs")  # rendering needs none of the outputs
    assert page.main(args) == 0
    assert docs_page.read_text() == text


def test_the_committed_page_renders_from_committed_files_alone(page, tmp_path, monkeypatch):
    """The repository's docs/benchmarks/ files render the page: the recording's progress from the cards, the replay
    journals, the live suites with their paired tests, and a named command for each section whose data is not
    committed. Rendered in a copy of the repository's layout, with the same relative paths as the committed page."""
    import shutil

    from kgtuner.bench.compare import wilcoxon_p

    docs = tmp_path / "docs" / "benchmarks"
    docs.mkdir(parents=True)
    for f in (REPO / "docs" / "benchmarks").glob("*"):
        if f.suffix in (".parquet", ".json"):
            shutil.copy(f, docs / f.name)
    shutil.copytree(REPO / "docs" / "benchmarks" / "tables", docs / "tables")  # issue 38's, as far as recorded
    shutil.copytree(REPO / "docs" / "benchmarks" / "superseded" / "tables", docs / "superseded" / "tables")
    journals = [*committed(REPO / "docs" / "benchmarks" / "replay", "journal.jsonl"),  # the fair replays
                *committed(REPO / "docs" / "benchmarks" / "superseded", "journal.jsonl")]  # the superseded ones
    for journal in journals:
        target = docs / journal.relative_to(REPO / "docs" / "benchmarks")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(journal, target)
    readme = tmp_path / "README.md"
    shutil.copy(REPO / "README.md", readme)
    monkeypatch.chdir(tmp_path)
    assert page.main(["--page", "docs/benchmarks.md", "--readme", "README.md", "--tables", "docs/benchmarks/tables",
                      "--replay", "docs/benchmarks/replay"]) == 0
    text = (tmp_path / "docs" / "benchmarks.md").read_text()
    large = text[text.index("## Live end-to-end check"):text.index("# Small graphs")]
    live = pd.read_parquet(docs / "large_results.parquet")
    wide = live.pivot_table(index=["dataset", "model", "seed"], columns="algorithm", values="test_mrr")
    p = wilcoxon_p((wide["kgtuner"] - wide["random"]).to_numpy())
    assert f"| random | {len(wide)} |" in large and f"| {p:.3g} |" in large
    assert ("TPE" in large) == ("tpe" in set(live["algorithm"]))
    assert ("load average" in large) == (docs / "large_searches.parquet").is_file()
    # the fair tables' recording state, from their cards; the superseded replays last, under a heading saying so
    for card in (docs / "tables").glob("*/card.json"):
        c = json.loads(card.read_text())
        if c["graph"] != "demo":
            assert f"{c['runs'] - c.get('answer_runs', 0)} of {sum(c['planned'].values())} planned runs recorded" in text
            assert (f"plus {c['answer_runs']} runs that give the replays' answers their seeds" in text) == \
                bool(c.get("answer_runs"))
    assert "demo" not in text[:text.index("# Small graphs")]
    superseded = text.index("# Superseded: the replays on the tables issue 38 found unfair")
    assert superseded > text.index("# Small graphs") and "## Search strategies replayed on the superseded tables" in \
        text[superseded:] and "## KGTuner's stage 2 after issue 37 (replayed on the superseded tables)" in text
    # a section whose data is not committed names the command that makes it
    assert (page.SRCC_COMMAND in text) == (not (docs / "srcc_runs.parquet").is_file())
    body = readme.read_text()
    assert body.count(page.README_BEGIN) == 1 and "KGTuner minus random search, test MRR" in text  # page's summary
    # every data file the page names is committed, and the replays' every-search frame is the one the journals render
    named = {f if f.startswith("docs/") else f"docs/{f}"
             for f in re.findall(r"`((?:docs/)?benchmarks/[^` ]+\.(?:parquet|jsonl|json))`", text)}
    assert "docs/benchmarks/replay/results.parquet" in named
    assert [f for f in named if REPO / f not in committed((REPO / f).parent, Path(f).name)] == []
    pd.testing.assert_frame_equal(pd.read_parquet(docs / "replay" / "results.parquet"),
                                  pd.read_parquet(REPO / "docs" / "benchmarks" / "replay" / "results.parquet"))
    # the committed page and README summary are what the committed files render (regenerate both with the tables)
    assert text == (REPO / "docs" / "benchmarks.md").read_text()
    assert body == (REPO / "README.md").read_text()


def test_large_findings_state_time_to_reach_and_rf_bore_ties(page, bench):
    keys = dict(dataset="g", model="complex")
    results = pd.DataFrame([
        {**keys, "algorithm": "kgtuner", "seed": 0, "valid_mrr": 0.30, "budget_s": 100.0, "final_trials": 4},
        {**keys, "algorithm": "random", "seed": 0, "valid_mrr": 0.20, "budget_s": 100.0, "final_trials": 16},
        {**keys, "algorithm": "rf_bore", "seed": 0, "valid_mrr": 0.20, "budget_s": 100.0, "final_trials": 14},
    ])
    curves = pd.DataFrame([
        {**keys, "algorithm": "kgtuner", "seed": 0, "t": 60.0, "best_valid_mrr": 0.10},
        {**keys, "algorithm": "kgtuner", "seed": 0, "t": 70.0, "best_valid_mrr": 0.25},
        {**keys, "algorithm": "random", "seed": 0, "t": 80.0, "best_valid_mrr": 0.20},
        {**keys, "algorithm": "rf_bore", "seed": 0, "t": 80.0, "best_valid_mrr": 0.20},
    ])
    text = "\n".join(page.large_findings(results, curves, bench))
    assert "KGTuner reached it in 1 of 1 searches, at 0.70 B (median)" in text
    assert "0.20 B into its stage 2, i.e. within 40% of stage 2's half" in text
    assert "runs 14.0 full-graph trials, so only about 4 are chosen by the forest. In 1 of 1 blocks" in text


def test_the_replay_section_comes_from_the_results_journal_and_the_table(page, tmp_path):
    """docs/benchmarks.md's replay section (issue 22): built from a `kgtuner bench replay` journal and its recorded
    table; absent when no replay was run."""
    import shutil

    from kgtuner.bench.benchmark import BenchmarkSettings, run_benchmark
    from kgtuner.bench.replay import ReplayTable

    docs = tmp_path / "benchmarks"
    docs.mkdir()
    assert page.section_replay(tmp_path / "none", tmp_path / "tables", docs, "benchmarks") == []
    tables = tmp_path / "tables"
    shutil.copytree(REPO / "docs/benchmarks/tables/demo", tables / "demo")
    run_benchmark(ReplayTable.load(tables / "demo"), BenchmarkSettings(algorithms=("kgtuner", "random"), workers=(1,),
                                                                       budgets=(2.0,), seeds=2),
                  tmp_path / "replay" / "demo" / "main" / "journal.jsonl")
    run_benchmark(ReplayTable.load(tables / "demo"), BenchmarkSettings(algorithms=("kgtuner", "kgtuner[top_k=2]"),
                                                                       workers=(1,), budgets=(2.0,), seeds=2),
                  tmp_path / "replay" / "demo" / "defaults" / "journal.jsonl")
    md = "\n".join(page.section_replay(tmp_path / "replay", tables, docs, "benchmarks"))
    assert "### demo" in md and "4 replayed searches" in md and "2 paired seeds" in md and "vs kgtuner" in md
    assert "#### KGTuner's defaults at 8 workers" in md and "kgtuner[top_k=2]" in md
    # part 4's decisions, by the fixed rule: its graphs (codex-m, then WN18RR) were not replayed here
    assert "### KGTuner's defaults: the decisions" in md and "`kgtuner[top_k=2]` |" not in md
    assert "Pending: the `defaults` grid decides once it is replayed in full on both graphs (codex-m: 0 of 630" in md
    assert (docs / "replay_demo_main_curves.png").stat().st_size > 0 and "replay_demo_main_curves.png" in md
    # every search once in results.parquet: kgtuner's cells are in both grids (a replay is deterministic)
    df = pd.read_parquet(tmp_path / "replay" / "results.parquet")
    assert len(df) == 6 and sorted(df["algorithm"].unique()) == ["kgtuner", "kgtuner[top_k=2]", "random"]
    assert {"graph", "algorithm", "workers", "budget_trials", "seed", "valid_mrr", "test_mrr"} <= set(df.columns)
    assert "Spearman with its 95% bootstrap interval over the configurations: batch 256 dim 200" in md


def test_a_complete_replay_summary_says_what_it_supports_under_both_stage2_mappings(page, tmp_path):
    """Once a graph's `main` grid is replayed in full, its summary (the superseded replays' on the page) gives each
    cell's figures and counts, per search, the cells where KGTuner is better / worse / undecided; where the
    `miss_bracket` grid replayed KGTuner with its misses lost, a verdict needs both mappings to agree."""
    from kgtuner.bench.benchmark import STUDIES

    rng = np.random.default_rng(0)
    base = {"kgtuner": 0.30, "kgtuner_asha": 0.20, "random": 0.20, "rf_bore": 0.40, "tpe": 0.30}

    def row(algorithm, workers, budget, seed, mrr):
        return {"graph": "codex-m", "algorithm": algorithm, "on_miss": "lose" if "lose" in algorithm else "nearest",
                "workers": workers, "budget_trials": budget, "budget_s": 100.0 * budget, "seed": seed,
                "valid_mrr": mrr, "test_mrr": mrr, "trials": 10, "misses": 0, "mean_distance": 0.0, "stopped": 0,
                "trials_stage2": 3 if algorithm.startswith("kgtuner") else 0,
                "repeats": 4 if (algorithm, workers, budget) == ("random", 1, 100.0) else 0,  # its pool ran out
                "searcher_s": 0.1, "anytime_json": json.dumps([[1.0, mrr, mrr]])}

    noise = {s: rng.normal(0, 0.01) for s in range(30)}  # KGTuner's and TPE's answers are the same, seed by seed
    main = [row(a, w, b, s, base[a] + (noise[s] if a in ("kgtuner", "tpe") else rng.normal(0, 0.01)))
            for a, w, b, s in STUDIES["main"].cells()]
    bracket = [row(f"{a}[on_miss=lose]", w, b, s, mrr + rng.normal(0, 0.01)) for a, mrr in (("kgtuner", 0.10),
               ("kgtuner_asha", 0.05)) for w in (1, 8) for b in (10.0, 30.0) for s in range(30)]
    frames = {("codex-m", "main"): pd.DataFrame(main), ("codex-m", "miss_bracket"): pd.DataFrame(bracket)}
    md = "\n".join(page.replay_summary(frames))
    cells = {tuple(line.split(" | ")[1:3]): line.split(" | ") for line in md.splitlines()
             if line.startswith("| codex-m |")}
    assert len(cells) == 6
    assert abs(float(cells["8", "30"][4]) - 0.30) < 0.01 and abs(float(cells["8", "30"][5]) - 0.10) < 0.01
    assert cells["1", "100"][5] == "-"  # no bracket replayed at budget 100
    assert "TPE +0.0000 [+0.0000, +0.0000], p = 1" in cells["8", "100"][6]  # no "-0.0000" for equal answers
    # random: better at budget 100 (one mapping), undecided at 10 and 30 (lost misses put KGTuner below it);
    # KGTuner+ASHA: better under both, its lost-miss replay paired with KGTuner's; RF+BORE: worse under both
    # mappings everywhere; TPE: the same answers, so never decided
    assert ("codex-m: against KGTuner+ASHA better in 6, worse in 0, undecided in 0 of 6 cells; against random search "
            "better in 2, worse in 0, undecided in 4 of 6 cells; against RF+BORE better in 0, worse in 6, undecided "
            "in 0 of 6 cells; against TPE better in 0, worse in 0, undecided in 6 of 6 cells.") in md
    assert "These are 24 paired tests at p < 0.05: about 1 could pass by chance" in md
    assert md.count("re-ran recorded runs") == 1 and "so its figure there leans against it: random search on codex-m " \
        "at 1 worker(s), budget 100: 4.0 of 10.0 trials." in md
    # a bracket replayed in part decides nothing yet: one mapping, and no "misses lost" figures
    partial = {**frames, ("codex-m", "miss_bracket"): pd.DataFrame(bracket[:-1])}
    text = "\n".join(page.replay_summary(partial))
    assert "against random search better in 6, worse in 0, undecided in 0 of 6 cells" in text
    assert all(line.split(" | ")[5] == "-" for line in text.splitlines() if line.startswith("| codex-m |"))
    # the page says the same under the graph's table, from the journals `kgtuner bench replay` writes
    from kgtuner.bench.benchmark import ResultsJournal

    for study, rows in (("main", main), ("miss_bracket", bracket)):
        journal = ResultsJournal(tmp_path / "replay" / "codex-m" / study / "journal.jsonl")
        journal.append({"kind": "header", "graph": "codex-m"})
        for r in rows:
            journal.append({"kind": "result", "row": r})
    docs = tmp_path / "benchmarks"
    docs.mkdir()
    text = "\n".join(page.section_replay(tmp_path / "replay", tmp_path / "tables", docs, "benchmarks"))
    assert "- codex-m: against KGTuner+ASHA better in 6, worse in 0, undecided in 0 of 6 cells;" in text
    # where KGTuner is worse (behind RF+BORE in every cell), what it could train there and what would have to change
    assert "Where KGTuner is behind" in text and text.count("behind RF+BORE by 0.") == 6
    assert "KGTuner trained 3.0 stage-2 runs of its top-10" in text
    assert "What would have to change: stage 2 must fit its share of the budget" in text
    assert "Against KGTuner+ASHA" not in text  # KGTuner is never behind it here


def test_the_defaults_decisions_are_shown_only_once_both_graphs_defaults_grids_are_complete(page):
    """Part 4 decides on codex-m and confirms on WN18RR: a grid replayed in part on either decides nothing yet."""
    from kgtuner.bench.benchmark import STUDIES

    def grid(graph, gain):
        return pd.DataFrame([{"graph": graph, "algorithm": a, "workers": w, "budget_trials": b, "seed": s,
                              "test_mrr": 0.3 + 0.001 * s + (0 if a == "kgtuner" else gain)}
                             for a, w, b, s in STUDIES["defaults"].cells()])

    frames = {("codex-m", "defaults"): grid("codex-m", 0.01), ("wn18rr", "defaults"): grid("wn18rr", 0.01)}
    df = pd.concat(frames.values(), ignore_index=True)
    md = "\n".join(page.section_defaults(df, page.replay_progress(frames, "defaults")))
    assert "| `kgtuner[top_k=5]` | codex-m | 30 |" in md and "| `kgtuner[top_k=5]` | wins | wins |" in md
    readme = "\n".join(page.defaults_line(frames))
    assert "decided on codex-m and confirmed on wn18rr" in readme and "won on both graphs and become the defaults" in readme
    partial = {**frames, ("wn18rr", "defaults"): frames["wn18rr", "defaults"].iloc[:-1]}
    md = "\n".join(page.section_defaults(df, page.replay_progress(partial, "defaults")))
    assert "| `kgtuner[top_k=5]`" not in md and "codex-m: 630 of 630 searches; wn18rr: 629 of 630 searches" in md
    assert page.defaults_line(partial) == []
    same = {k: v.assign(test_mrr=0.3 + 0.001 * v["seed"]) for k, v in frames.items()}  # no variant differs
    assert "no variant won on both graphs, so every default stays as it was" in "\n".join(page.defaults_line(same))
