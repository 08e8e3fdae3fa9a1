"""Issue 38's answers' seeds: a replay never draws the seeds recorded for the answers (``record --answers``), so
recording them changes no search, and each answer is scored by the mean test MRR over every recorded seed of its
configuration -- again, from the grown table, without replaying (``kgtuner.bench.answer_score``)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from replay_helpers import _frames, run_benchmark_script

from kgtuner.bench.answer_score import DRAWN, SEEDS_MEAN, score_by_seeds
from kgtuner.bench.benchmark import run_cell
from kgtuner.bench.replay import ReplayTable



def _noisy(pool: str, index: int) -> bool:
    """The configurations with noise seeds (1, 2) in the synthetic table: every third of the full pool."""
    return pool == "full" and index % 3 == 0


#: what a later seed of an answer scores above its main run, so that a mean over them shows
LATER_SEED_GAIN = 0.1


def _with_seeds(runs: pd.DataFrame, curves: pd.DataFrame, run_ids, phase: str, seeds=(1, 2)):
    """The frames with the seeds ``seeds`` of each main run of ``run_ids``' configurations added (those it lacks),
    recorded in ``phase``; each better than the main run by LATER_SEED_GAIN a seed, in validation and test, so
    that a search drawing them would go another way."""
    runs, curves = runs.copy(), curves.copy()
    new_runs, new_curves = [runs], [curves]
    for rid in sorted(set(run_ids)):
        main_id = rid.rsplit("-s", 1)[0] + "-s0"
        main = runs[runs.run_id == main_id].iloc[0]
        have = set(runs[(runs.pool == main.pool) & (runs.config_index == main.config_index)
                        & (runs.batch_size == main.batch_size) & (runs.dim == main.dim)].seed)
        for seed in (s for s in seeds if s not in have):
            sid = f"{main_id[:-3]}-s{seed}"
            new_runs.append(pd.DataFrame([{**main.to_dict(), "run_id": sid, "seed": seed, "phase": phase,
                                           "test_mrr": main.test_mrr + LATER_SEED_GAIN * seed}]))
            pts = curves[curves.run_id == main_id].copy()
            new_curves.append(pts.assign(run_id=sid, valid_mrr=pts.valid_mrr + LATER_SEED_GAIN * seed))
    return pd.concat(new_runs, ignore_index=True), pd.concat(new_curves, ignore_index=True)


SEARCH_KEYS = ("algorithm", "workers", "budget_trials", "seed", "valid_mrr", "test_mrr_drawn", "answer_run",
               "answer_seed", "trials", "misses", "repeats", "end_s")


def _search(row):
    return {k: row[k] for k in SEARCH_KEYS}


def _cells(table):
    return [run_cell(table, algorithm, 2, 10.0, seed) for algorithm in ("random", "rf_bore") for seed in range(3)]


def test_the_answers_seeds_are_never_drawn_and_score_every_answer_by_its_mean():
    runs, curves = _frames(noisy=_noisy, scramble=1)
    before = _cells(ReplayTable(runs, curves, graph="demo", source="a"))
    answers = [r["answer_run"] for r in before if r["answer_run"]]
    assert len(answers) == 6
    grown = ReplayTable(*_with_seeds(runs, curves, answers, "answers"), graph="demo", source="a")
    after = _cells(grown)
    # no search changed: the same trials, draws, answers and drawn figures
    assert [_search(r) for r in after] == [_search(r) for r in before]
    for row in after:
        seeds = grown.seeds["full"][int(row["answer_run"].split("-")[1])]
        assert row["answer_seeds"] == "0,1,2" and row["answer_score"] == SEEDS_MEAN
        assert row["test_mrr"] == pytest.approx(np.mean([r.test["mrr"] for r in seeds.values()]))
        # the answer's last anytime point is the answer, scored alike
        assert json.loads(row["anytime_json"])[-1][2] == pytest.approx(row["test_mrr"])
    gained = [a["test_mrr"] - b["test_mrr"] for a, b in zip(after, before) if b["answer_seeds"] == "0"]
    assert gained and all(g == pytest.approx(LATER_SEED_GAIN) for g in gained)  # mean of +0, +0.1, +0.2
    # scoring the rows replayed before on the grown table gives what replaying on it gives, without replaying
    rescored = score_by_seeds(before, grown)
    assert [{k: r[k] for k in (*SEARCH_KEYS, "test_mrr", "answer_seeds", "anytime_json")} for r in rescored] == \
        [{k: r[k] for k in (*SEARCH_KEYS, "test_mrr", "answer_seeds", "anytime_json")} for r in after]
    assert score_by_seeds(rescored, grown) == rescored  # scoring twice changes nothing
    # the instrument: the same seeds recorded as the table's noise (drawn) change the searches
    drawn = _cells(ReplayTable(*_with_seeds(runs, curves, answers, "noise"), graph="demo", source="a"))
    assert [_search(r) for r in drawn] != [_search(r) for r in before]


def test_a_proxy_answer_keeps_its_drawn_figure_a_failed_seed_counts_zero_and_an_older_table_is_untouched():
    runs, curves = _frames(noisy=_noisy, scramble=1)
    table = ReplayTable(runs, curves, graph="demo", source="a")
    rid = table.seeds["full"][3][0].run_id  # a configuration with 3 seeds
    row = {"graph": "demo", "answer_run": rid, "test_mrr": 0.9, "answer_test_is_valid_proxy": False,
           "answer_seeds": "0", "anytime_json": json.dumps([[1.0, None, None, None], [2.0, 0.5, 0.9, rid],
                                                           [3.0, 0.5, 0.7, None], [4.0, 0.5, 0.7]])}
    mean = float(np.mean([r.test["mrr"] for r in table.seeds["full"][3].values()]))
    scored = score_by_seeds([row], table)[0]
    assert (scored["test_mrr"], scored["test_mrr_drawn"], scored["answer_score"]) == (pytest.approx(mean), 0.9,
                                                                                        SEEDS_MEAN)
    # only a point with its scoring run is rescored (a proxy's, and an older replay's 3-element points, are not)
    assert json.loads(scored["anytime_json"]) == [[1.0, None, None, None], [2.0, 0.5, pytest.approx(mean), rid],
                                                  [3.0, 0.5, 0.7, None], [4.0, 0.5, 0.7]]
    proxy = score_by_seeds([{**row, "answer_test_is_valid_proxy": True}], table)[0]
    assert (proxy["test_mrr"], proxy["answer_score"]) == (0.9, DRAWN)
    none = score_by_seeds([{**row, "test_mrr": None}], table)[0]  # no full-graph answer stays without one
    assert none["test_mrr"] is None and none["answer_score"] == DRAWN
    # a seed whose run failed (no test MRR) counts 0 in the mean
    failed = runs.copy()
    failed.loc[failed.run_id == rid.replace("-s0", "-s1"), ["test_mrr", "status"]] = [None, "failed"]
    got = score_by_seeds([row], ReplayTable(failed, curves, graph="demo", source="a"))[0]["test_mrr"]
    want = np.mean([0.0 if r.run_id.endswith("-s1") else r.test["mrr"] for r in table.seeds["full"][3].values()])
    assert got == pytest.approx(want) and got < mean
    # rows read back through a DataFrame (NaN for None): a search without a full-graph answer (its answer_run a
    # stage-1 run, which has no test MRR) keeps none, and a row scored before is scored again from its drawn figure
    subgraph = runs.copy()
    subgraph.loc[subgraph.pool == "stage1", "test_mrr"] = None  # as recorded: no test on the subgraph
    table = ReplayTable(subgraph, curves, graph="demo", source="a")
    stage1 = table.runs["stage1"][0].run_id
    assert table.seed_score(stage1) == (None, [0])
    frame = pd.DataFrame([{**row, "answer_run": stage1, "test_mrr": None}, scored]).to_dict("records")
    again = score_by_seeds(frame, table)
    assert again[0]["test_mrr"] is None and again[0]["answer_score"] == DRAWN
    assert again[1]["test_mrr"] == pytest.approx(mean) and again[1]["answer_score"] == SEEDS_MEAN
    lost = score_by_seeds([{**scored, "answer_run": "not-in-the-table"}], table)[0]
    assert (lost["test_mrr"], lost["answer_score"]) == (0.9, DRAWN)  # its drawn figure, not the stale mean
    # another graph's row, and every row of an unpriced (older) table, are returned as they are
    assert score_by_seeds([{**row, "graph": "other"}], table) == [{**row, "graph": "other"}]
    old = ReplayTable(runs.drop(columns="cost"), curves.drop(columns="cost"), graph="demo")
    assert score_by_seeds([row], old) == [row]
    # and a replay on an unpriced table writes its row as before: no scoring columns, 3-element anytime points
    plain = run_cell(old, "random", 2, 3.0, 0)
    assert not {"answer_score", "test_mrr_drawn"} & set(plain)
    assert {len(p) for p in json.loads(plain["anytime_json"])} == {3}


def test_replay_on_a_complete_journal_replays_nothing_and_scores_the_answers_from_the_grown_table(tmp_path, capsys):
    """The path replay_benchmark.sh takes after `record --answers`: the same `kgtuner bench replay` command."""
    from kgtuner.bench.cli import main

    runs, curves = _frames(noisy=_noisy, scramble=1)
    folder, out = tmp_path / "tables" / "demo", tmp_path / "replay" / "demo" / "custom"
    folder.mkdir(parents=True)
    (folder / "card.json").write_text(json.dumps({"graph": "demo", "settings": {"model": "complex"}}))

    def write(r, c):
        r.to_parquet(folder / "runs.parquet", index=False)
        c.to_parquet(folder / "curves.parquet", index=False)

    write(runs, curves)
    command = ["replay", "--table", str(folder), "--out", str(out), "--algorithms", "random", "--workers", "2",
               "--budgets", "10", "--seeds", "3"]
    assert main(command) == 0
    first = pd.read_parquet(out / "results.parquet")
    journal = (out / "journal.jsonl").read_text()
    write(*_with_seeds(runs, curves, first.answer_run, "answers"))
    assert main(command) == 0
    assert (out / "journal.jsonl").read_text() == journal  # nothing replayed again
    second = pd.read_parquet(out / "results.parquet")
    assert list(second.answer_run) == list(first.answer_run) and set(second.answer_seeds) == {"0,1,2"}
    assert (second.test_mrr_drawn == first.test_mrr_drawn).all()
    assert (second.test_mrr > first.test_mrr - 1e-12).all() and (second.test_mrr > first.test_mrr + 1e-6).any()
    # the page reads the journals and scores them from the same table: the fair section, and every grid's frame
    from script_loader import load_script

    load_script("benchmarks_page")
    import page.fair as fair
    from page.frames import replay_frames

    assert list(fair.load_journal(out / "journal.jsonl", folder).test_mrr) == pytest.approx(list(second.test_mrr))
    frames = replay_frames(tmp_path / "replay", tmp_path / "tables")
    assert list(frames["demo", "custom"].test_mrr) == pytest.approx(list(second.test_mrr))
    assert list(replay_frames(tmp_path / "replay")["demo", "custom"].test_mrr) == pytest.approx(list(first.test_mrr))
    # `kgtuner bench compare` scores them from the tables it is given, and warns where it is given none
    assert main(["compare", "--results", str(out), "--tables", str(folder), "--out", str(tmp_path / "c")]) == 0
    compared = pd.read_parquet(tmp_path / "c" / "results.parquet")
    assert list(compared.test_mrr) == pytest.approx(list(second.test_mrr))
    assert "warning" not in capsys.readouterr().err
    assert main(["compare", "--results", str(out)]) == 0
    assert "the answers of demo keep the scores they had when replayed" in capsys.readouterr().err


@pytest.mark.slow
def test_the_benchmark_script_records_the_answers_seeds_and_scores_them_without_replaying_again(tmp_path):
    """scripts/benchmarks/replay_benchmark.sh on a complete tiny calibrated table: it replays the grid, records
    3 seeds of every answer (`record --answers`, phase `answers`; in two shards side by side, SHARDS=2), and
    writes the results again with each answer scored by the mean over its seeds, the replay journal untouched."""
    from kgtuner.bench import pool as bp
    from kgtuner.bench import record as br
    from kgtuner.bench.table import finalize

    settings = bp.RecordSettings(
        dataset="demo", stage1_configs=4, full_configs=3, decoupled_configs=0, expand_top=1, max_epochs=2,
        stage1_cap_s=2.0, expand_cap_s=0.5, full_cap_s=0.5, decoupled_cap_s=0.5, noise_stage1_top=0, noise_stage1_random=0,
        noise_expand_top=0, noise_full_top=0, noise_full_random=0)
    # recorded here (this process holds its journal's lock), committed as a table: the script rebuilds the journal
    br.record(settings, tmp_path / "recorded", command="test", log=lambda line: None)
    finalize(tmp_path / "recorded", tmp_path / "tables" / "demo")
    before = pd.read_parquet(tmp_path / "tables" / "demo" / "runs.parquet")
    assert set(before.seed) == {0}  # no noise seeds: every seed past 0 below is an answer's
    proc = run_benchmark_script(tmp_path, "--algorithms random --workers 1 --budgets 2 --seeds 3", SHARDS="2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "answers' seeds" in proc.stdout and "answers scored by their seeds" in proc.stdout
    records = br.Journal(tmp_path / "journals" / "demo" / "journal.jsonl").read()
    assert {r.get("shard") for r in records if r["kind"] == "session"} >= {"1/2", "2/2"}  # both recorded seeds
    ids = [r["run_id"] for r in records if r["kind"] == "run"]
    assert len(ids) == len(set(ids))  # no run recorded by both
    assert "[full/answers 1/" in (tmp_path / "journals" / "demo" / "record.log").read_text()  # its progress line
    runs = pd.read_parquet(tmp_path / "tables" / "demo" / "runs.parquet")
    extra = runs[runs.seed > 0]
    assert len(extra) and set(extra.phase) == {"answers"} and set(extra.pool) == {"full"}
    # the card names the answers' seeds apart from the plan: the plan stays complete, never "n+k of n planned"
    planned = len(before)
    card = json.loads((tmp_path / "tables" / "demo" / "card.json").read_text())
    assert card["runs"] == planned + len(extra) and card["answer_runs"] == len(extra)
    assert sum(card["in_plan"].values()) == planned
    text = (tmp_path / "tables" / "demo" / "card.md").read_text()
    assert "up to 2 processes side by side (`record --shard k/n`" in text
    assert (f"**Complete:** {planned} of {planned} planned runs recorded" in text
            and f"plus {len(extra)} runs that give the replays' answers their seeds" in text)
    assert f"demo: {planned} of {planned} planned runs recorded" in proc.stdout
    results = pd.read_parquet(tmp_path / "replay" / "demo" / "custom" / "results.parquet")
    journal = (tmp_path / "replay" / "demo" / "custom" / "journal.jsonl").read_text().splitlines()
    assert len(journal) == 1 + len(results) == 4  # the header and one line per search: none replayed again
    table = ReplayTable.load(tmp_path / "tables" / "demo")
    for row in results.itertuples(index=False):
        mean, seeds = table.seed_score(row.answer_run)
        assert row.answer_seeds == "0,1,2" and seeds == [0, 1, 2]
        if row.answer_test_is_valid_proxy:  # cut before its best validation: its own proxy, no mean of seeds
            assert row.answer_score == DRAWN and row.test_mrr == row.test_mrr_drawn
        else:
            assert row.answer_score == SEEDS_MEAN and row.test_mrr == pytest.approx(mean)
            assert row.test_mrr_drawn == pytest.approx(table.runs["full"][int(row.answer_run.split("-")[1])].test["mrr"])
    assert (results.answer_score == SEEDS_MEAN).any()
