"""Issue 38's recording protocol: runs priced per shape (kgtuner.bench.cost), one rule for every full-graph pool,
validation every epoch, and the decoupled-space pool of the one-stage arm."""

from __future__ import annotations

import pytest

from kgtuner.bench import cost as bc
from kgtuner.bench import pool as bp
from kgtuner.bench import record as br
from kgtuner.errors import ConfigError

#: A tiny calibrated recording of the demo graph (every pool, the decoupled one included).
TINY = dict(dataset="demo", stage1_space="decoupled_cpu_sampled", full_space="full_cpu_sampled", stage1_configs=4, full_configs=2, decoupled_configs=2, expand_top=1, max_epochs=3,
            stage1_cap_s=2.0, expand_cap_s=0.5, full_cap_s=0.5, decoupled_cap_s=0.5, noise_stage1_top=0,
            noise_stage1_random=0, noise_expand_top=0, noise_full_top=0, noise_full_random=0,
            noise_decoupled_top=0, noise_decoupled_random=0)


def tiny(**kw) -> bp.RecordSettings:
    return bp.RecordSettings(**{**TINY, **kw})


@pytest.fixture(scope="module")
def demo():
    from kgtuner.data import FilterIndex, load_dataset

    kg = load_dataset("demo")
    return kg, FilterIndex.from_graph(kg)


@pytest.mark.parametrize("valid_every", [1, 3, 7, 50])
@pytest.mark.parametrize("price", [bc.ShapeCost(0.01, 0.5), bc.ShapeCost(0.003, 0.02), bc.ShapeCost(0.2, 0.0)])
def test_the_step_limit_is_the_most_steps_whose_cost_fits_the_cap(valid_every, price):
    for cap in (0.9, 1.0, 2.5, 7.0, 33.3):
        limit = price.max_steps(cap, valid_every)
        fits = [s for s in range(1, 12000) if price.cost(s, price.validations_at(s, valid_every)) <= cap + 1e-9 * max(1.0, cap)]
        assert limit == (max(fits) if fits else 1), (cap, valid_every, price)


def test_the_settings_hold_one_rule_for_every_full_graph_pool():
    with pytest.raises(ConfigError, match="one_rule.*decoupled: cap 9.0.*--one-rule false"):
        tiny(decoupled_cap_s=9.0)
    with pytest.raises(ConfigError, match="valid every"):
        tiny(full_valid_every=2)
    assert tiny(decoupled_cap_s=9.0, one_rule=False).decoupled_cap_s == 9.0
    with pytest.raises(ConfigError, match="cost='seconds'"):
        tiny(cost="seconds")


def test_a_journal_begun_before_the_protocol_keeps_its_own():
    """A header without the new settings reads as the old protocol (measured seconds, steps, no decoupled pool),
    and its pools' fingerprint is the one it was written with (no ``decoupled`` entry)."""
    old = {k: v for k, v in tiny(one_rule=False, expand_cap_s=1.0).to_dict().items()
           if k not in ("cost", "valid_unit", "one_rule", "decoupled_configs")}
    s = bp.RecordSettings.from_header(old)
    assert (s.cost, s.valid_unit, s.one_rule, s.decoupled_configs) == ("measured", "steps", False, 0)
    assert "decoupled" not in bp.Pools(s, "demo").fingerprint()
    assert "decoupled" not in bp.Pools(s, "demo").planned_counts()


def test_the_decoupled_pool_is_the_stage1_space_at_drawn_stage2_sizes():
    p = bp.Pools(tiny(decoupled_configs=40), "demo")
    configs = p.decoupled_configs()
    assert configs == bp.Pools(tiny(decoupled_configs=40), "demo").decoupled_configs()  # fixed seeds
    assert {(c["batch_size"], c["dim"]) for c in configs} == set(p.expand_sizes())  # every size drawn
    searched = {k for k in p.stage1_space.to_config(p.stage1_space.sample_array(
        __import__("numpy").random.default_rng(0), 1)[0]) if k not in ("batch_size", "dim")}
    for c in configs:
        assert {k for k in c if k not in ("batch_size", "dim")} <= searched | {"gamma", "adv_weight", "reg_weight"}
    assert configs[0] != p.stage1_configs()[0]  # its own draw, not the stage-1 pool's
    assert p.fingerprint()["decoupled"] != bp.Pools(tiny(decoupled_configs=40, seed=1), "demo").fingerprint()[
        "decoupled"]


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    out = tmp_path_factory.mktemp("cost") / "demo"
    lines = []
    with pytest.MonkeyPatch.context() as mp:  # short calibrations: this tests the protocol, not the prices
        mp.setattr(bc, "TIMED_STEPS", 4)
        mp.setattr(bc, "REPEATS", 1)
        mp.setattr(bc, "VALID_REPEATS", 1)
        br.record(tiny(), out, command="test", log=lines.append)
    return out, br.Journal(out / "journal.jsonl").read(), lines


def test_every_shape_is_priced_once_before_the_first_run(recording):
    out, records, _ = recording
    kinds = [r["kind"] for r in records]
    first_run = kinds.index("run")
    calibrations = [r for r in records if r["kind"] == "calibration"]
    assert calibrations and all(kinds.index("calibration") < first_run for _ in calibrations)
    assert len({r["shape"] for r in calibrations}) == len(calibrations)  # once per shape
    runs = [r for r in records if r["kind"] == "run"]
    shapes = {bc.Shape.of(bp.POOL_GRAPH[r["pool"]], r["config"]).key for r in runs}
    assert shapes <= {r["shape"] for r in calibrations}
    # a restart prices nothing again and records nothing twice
    br.record(tiny(), out, command="test", log=lambda line: None)
    again = br.Journal(out / "journal.jsonl").read()
    assert [r for r in again if r["kind"] == "calibration"] == calibrations


def test_a_run_costs_its_priced_steps_and_validations_within_its_cap(recording):
    _, records, _ = recording
    prices = bc.prices(records)
    runs = [r for r in records if r["kind"] == "run"]
    assert {r["pool"] for r in runs} == set(bp.POOLS)
    for r in runs:
        price = prices[bc.Shape.of(bp.POOL_GRAPH[r["pool"]], r["config"]).key]
        assert r["cost"] == pytest.approx(price.cost(r["steps"], r["n_valid"]))
        assert r["cost"] <= r["cap_s"] + 1e-9
        assert r["valid_every"] == max(1, round(r["steps_per_epoch"]))  # every epoch of its own graph and batch
        assert [p["cost"] for p in r["curve"]] == pytest.approx(bc.curve_costs(r["curve"], price))
        if r["stop_reason"] == "time_cap":
            assert r["steps"] == r["cap_steps"]
    assert any(r["stop_reason"] == "time_cap" for r in runs)  # the caps bind somewhere in this tiny table
    assert any(r["stop_reason"] in ("epochs", "patience") for r in runs)


def test_a_run_stops_at_the_same_step_however_slow_the_machine(demo, monkeypatch):
    """The measured cap stops a run earlier on a slow machine; the priced one does not move."""
    demo_graph, fi = demo
    config = bp.Pools(tiny(), "demo").full_configs()[0]
    controls = tiny().controls("full")
    price = bc.ShapeCost(0.002, 0.01)

    def run(measured: bool):
        return br.train_config(demo_graph, config, model="complex", controls=controls, filter_index=fi, cap_s=0.2,
                               price=None if measured else price)

    def clock(tick: float):  # a machine on which every reading of the CPU clock advances ``tick`` seconds
        ticks = [0.0]

        def now():
            ticks[0] += tick
            return ticks[0]
        return now

    monkeypatch.setitem(br._CLOCKS, "cpu", clock(1e-4))
    fast_priced, fast_measured = run(False), run(True)
    monkeypatch.setitem(br._CLOCKS, "cpu", clock(0.05))  # 500 times slower
    slow_priced, slow_measured = run(False), run(True)
    assert slow_priced["steps"] == fast_priced["steps"] == price.max_steps(0.2, fast_priced["valid_every"])
    assert slow_priced["stop_reason"] == "time_cap"
    assert [p["valid_mrr"] for p in slow_priced["curve"]] == [p["valid_mrr"] for p in fast_priced["curve"]]
    assert [p["cost"] for p in slow_priced["curve"]] == [p["cost"] for p in fast_priced["curve"]]
    assert slow_measured["steps"] < fast_measured["steps"]  # the instrument: the measured cap does move


def test_the_calibration_times_a_shape_on_its_graph(demo):
    demo_graph, fi = demo
    rec = bc.calibrate_shape(demo_graph, bc.Shape("full", 64, 32, "32"), model="complex", max_valid_triples=None,
                             filter_index=fi)
    assert rec["kind"] == "calibration" and rec["shape"] == "full-b64-d32-n32"
    assert rec["step_s"] > 0 and rec["valid_s"] > 0 and len(rec["step_repeats"]) == bc.REPEATS
    bigger = bc.calibrate_shape(demo_graph, bc.Shape("full", 512, 256, "128"), model="complex",
                                max_valid_triples=None, filter_index=fi)
    assert bigger["step_s"] > rec["step_s"]  # a step of 16x the batch's scores costs more


def test_the_card_accounts_for_the_protocol_and_a_restore_keeps_the_prices(recording, tmp_path):
    """The card states the one rule, the priced cost, the converged share per pool and the prices; the journal
    rebuilt from the table (another machine) holds the same prices and continues without pricing anything again."""
    import json

    import pandas as pd

    from kgtuner.bench import restore as brs
    from kgtuner.bench import table as bt

    out, records, _ = recording
    tables = tmp_path / "tables"
    bt.finalize(out, tables)
    card = (tables / "card.md").read_text()
    assert "One rule for every full-graph run (`expand`, `full`, `decoupled`): cap 0.5 priced seconds" in card
    assert "validation every 1 epochs" in card and "`decoupled`: 2 configurations" in card
    runs = [r for r in records if r["kind"] == "run"]
    full = [r for r in runs if r["pool"] != "stage1" and r["stop_reason"] != "failed"]
    share = sum(r["stop_reason"] in ("patience", "epochs") for r in full) / len(full)
    assert f"Converged runs: {share:.0%} of the {len(full)} full-graph runs" in card
    calibrations = [r for r in records if r["kind"] == "calibration"]
    assert sum(line.startswith(("| full b", "| sub b")) for line in card.splitlines()) == len(calibrations)
    data = json.loads((tables / "card.json").read_text())
    assert data["protocol"]["convergence"]["full"]["runs"] == sum(r["pool"] == "full" for r in full)
    assert pd.read_parquet(tables / "curves.parquet")["cost"].notna().all()
    assert pd.read_parquet(tables / "runs.parquet")["cost"].notna().all()
    brs.restore_journal(tables, tmp_path / "restored")
    restored = br.Journal(tmp_path / "restored" / "journal.jsonl").read()
    assert [r for r in restored if r["kind"] == "calibration"] == calibrations
    lines = []
    br.record(tiny(), tmp_path / "restored", command="test", log=lines.append)
    assert not any(line.startswith("calibration") for line in lines)
    assert [r for r in br.Journal(tmp_path / "restored" / "journal.jsonl").read() if r["kind"] == "run"
            ] == [r for r in restored if r["kind"] == "run"]


def test_the_answers_of_replays_are_recorded_with_more_seeds_once(recording, tmp_path):
    import shutil

    out, records, _ = recording
    journal = tmp_path / "demo"
    shutil.copytree(out, journal, ignore=shutil.ignore_patterns("record.lock"))
    answer = next(r["run_id"] for r in records if r.get("kind") == "run" and r["pool"] == "expand")
    br.record(tiny(), journal, command="test", log=lambda line: None, answers=[answer, answer])
    runs = {r["run_id"]: r for r in br.Journal(journal / "journal.jsonl").read() if r.get("kind") == "run"}
    base = runs[answer]
    for seed in range(1, bp.ANSWER_SEEDS):
        twin = runs[answer[:-1] + str(seed)]
        assert twin["config"] == base["config"] and twin["seed"] == seed
        assert twin["phase"] == "answers"  # recorded for the answer, not by the pool's plan
    assert base["phase"] == "main" and {r["phase"] for r in runs.values()} <= {"main", "noise", "answers"}
    before = len(runs)
    br.record(tiny(), journal, command="test", log=lambda line: None)  # a restart: nothing again
    after = br.Journal(journal / "journal.jsonl").read()
    assert sum(r.get("kind") == "run" for r in after) == before
    assert [r["run_ids"] for r in after if r.get("kind") == "answers"] == [[answer]]
    # the committed table keeps the answers record, so a journal restored elsewhere knows them and trains nothing
    import json

    from kgtuner.bench import table as bt
    from kgtuner.bench.restore import restore_journal

    bt.finalize(journal, tmp_path / "table")
    import pandas as pd

    phases = pd.read_parquet(tmp_path / "table" / "runs.parquet").set_index("run_id")["phase"]
    assert phases[answer[:-1] + "1"] == "answers" and phases[answer] == "main"
    card = json.loads((tmp_path / "table" / "card.json").read_text())
    assert [a["run_ids"] for a in card["journal"]["answers"]] == [[answer]]
    restore_journal(tmp_path / "table", tmp_path / "restored")
    restored = br.Journal(tmp_path / "restored" / "journal.jsonl").read()
    assert [r["run_ids"] for r in restored if r.get("kind") == "answers"] == [[answer]]
    assert {r["run_id"]: r["phase"] for r in restored if r.get("kind") == "run"} == {
        rid: r["phase"] for rid, r in runs.items()}
    br.record(tiny(), tmp_path / "restored", command="test", log=lambda line: None)
    assert sum(r.get("kind") == "run" for r in br.Journal(tmp_path / "restored" / "journal.jsonl").read()) == before
    with pytest.raises(ConfigError, match="not a run id"):
        bp.parse_run_id("full-12-s0")


def test_the_card_of_a_recording_with_no_full_graph_run_yet(recording, tmp_path):
    """A partial table (stage 1 only so far, as at the start of a real recording) gets its card, which says so."""
    import json

    from kgtuner.bench import card_cost
    from kgtuner.bench import table as bt

    out, records, _ = recording
    header = next(r for r in records if r["kind"] == "header")
    header = {**header, "dataset": "codex-m"}  # a graph with a published value
    stage1 = [r for r in records if r["kind"] == "run" and r["pool"] == "stage1"]
    lines = card_cost.section(header, stage1, [r for r in records if r["kind"] == "calibration"])
    assert any("no full-graph run yet (the published tuned ComplEx: 0.337" in line for line in lines)
    journal = tmp_path / "partial"
    journal.mkdir()
    (journal / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records
                                                   if r["kind"] != "run" or r["pool"] == "stage1"))
    bt.finalize(journal, tmp_path / "table")
    assert "Converged runs: - of the 0 full-graph runs" in (tmp_path / "table" / "card.md").read_text()


def test_pool_headroom_predicts_each_runs_priced_cost_and_counts_trials_against_the_pool(recording, tmp_path):
    """scripts/benchmarks/pool_headroom.py: a full-graph run that ends by its epoch limit or its cap costs exactly
    what the calibration predicts (early stopping less), and the script replays a search on the recorded table with
    that unit, printing its trials against the stage-1 pool."""
    import contextlib
    import io
    import subprocess
    import sys
    from pathlib import Path

    from script_loader import load_script

    headroom = load_script("pool_headroom")
    out, records, _ = recording
    predicted = headroom.predicted_costs(out, "demo")
    runs = [r for r in records if r["kind"] == "run" and r["pool"] in ("full", "decoupled") and r["seed"] == 0]
    assert {r["pool"] for r in runs} == {"full", "decoupled"}
    for r in runs:
        guess = predicted[r["pool"]][r["config_index"]]
        if r["stop_reason"] in ("epochs", "time_cap"):
            assert r["cost"] == pytest.approx(guess, rel=1e-9)
        else:
            assert r["cost"] <= guess + 1e-9
    table = tmp_path / "table"
    kgtuner = str(Path(sys.executable).with_name("kgtuner"))
    subprocess.run([kgtuner, "bench", "report", "--journal", str(out), "--out", str(table)], check=True,
                   capture_output=True)
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert headroom.main(["--journal", str(out), "--table", str(table), "--dataset", "demo", "--algorithms",
                              "kgtuner", "--workers", "1", "--budgets", "2"]) == 0
    lines = text.getvalue().splitlines()
    mean = sum(predicted["full"]) / len(predicted["full"])
    assert f"budget unit = predicted full-pool mean {mean:.1f} s" in lines[1]
    assert lines[2].startswith("kgtuner       workers 1 budget     2:") and "pool 4), repeats" in lines[2]
    from kgtuner.bench import benchmark

    assert benchmark.mean_trial_seconds.__module__ == "kgtuner.bench.benchmark"  # put back


def test_the_gap_to_the_published_mrr_reads_below_or_above_it():
    """A best test MRR above the published value is "above it", never "-3.0% below it"."""
    from kgtuner.bench.card_cost import gap_words

    assert gap_words((0.337 - 0.3027) / 0.337) == "10.2% below"
    assert gap_words((0.475 - 0.49) / 0.475) == "3.2% above"
    assert gap_words(0.0) == "0.0% below"
