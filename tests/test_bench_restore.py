"""``kgtuner bench restore``: a journal rebuilt from its committed table, the checks that keep a continued recording
the same one (fingerprints, a live recorder, an older journal), and the pilot's own file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from kgtuner.bench import pilot as bpl
from kgtuner.bench import pool as bp
from kgtuner.bench import record as br
from kgtuner.bench import table as bt
from kgtuner.errors import ConfigError
from record_helpers import REPO, tiny


# ------------------------------------------------------------------------------------ restore
def _journal_records(path: Path) -> list[dict]:
    return [json.loads(json.dumps(r)) for r in br.Journal(path / "journal.jsonl").read()]


def test_a_journal_restored_from_its_table_is_the_recorded_one_and_the_recording_continues(recorded, tmp_path):
    from kgtuner.bench.restore import restore_journal

    s, out, tables, _ = recorded
    done = restore_journal(tables, tmp_path / "restored")
    assert done["runs"] == len(bt.load_journal(out)[2]) and not done["rebuilt_header"]
    old, new = _journal_records(out), _journal_records(tmp_path / "restored")
    assert new[-1]["kind"] == "restore" and new[-1]["runs"] == done["runs"]
    # every record, curves and configurations included, to the byte (an int read back as a float would show)
    assert [json.dumps(r, sort_keys=True) for r in new if r["kind"] != "restore"] == \
        [json.dumps(r, sort_keys=True) for r in old]
    bt.finalize(tmp_path / "restored", tmp_path / "t2")
    for name in ("runs.parquet", "curves.parquet"):
        assert pq.read_table(tables / name).equals(pq.read_table(tmp_path / "t2" / name))
    again = br.record(s, tmp_path / "restored", command="test", log=lambda line: None)
    assert again["recorded_now"] == 0 and again["complete"]
    with pytest.raises(ConfigError, match="already holds a journal"):
        restore_journal(tables, tmp_path / "restored")
    with pytest.raises(ConfigError, match="not a recorded table"):
        restore_journal(tmp_path, tmp_path / "x")


def test_a_table_reported_before_cards_kept_the_journal_records_restores_with_a_rebuilt_header(recorded, tmp_path):
    """card.json files written before the journal's records were kept in them: the header is rebuilt from the
    card's facts and checked run by run against the pools this code draws; recording continues from there."""
    import shutil

    from kgtuner.bench.restore import restore_journal

    s, out, tables, _ = recorded
    legacy = tmp_path / "legacy"
    shutil.copytree(tables, legacy)
    card = json.loads((legacy / "card.json").read_text())
    del card["journal"]
    (legacy / "card.json").write_text(json.dumps(card))
    done = restore_journal(legacy, tmp_path / "j")
    assert done["rebuilt_header"] and done["sessions"] == 1
    header, sessions, runs = bt.load_journal(tmp_path / "j")
    old_header, _, old_runs = bt.load_journal(out)
    assert header["fingerprint"] == old_header["fingerprint"] and header["settings"] == old_header["settings"]
    assert runs == sorted(old_runs, key=lambda r: r["ended_unix"])
    partial = tmp_path / "partial"  # a table cut short: recording continues with the runs it lacks
    shutil.copytree(legacy, partial)
    rows = pq.read_table(partial / "runs.parquet")
    keep = [r for r in rows.column("run_id").to_pylist() if not r.startswith("full-")]
    pq.write_table(rows.filter(pd.Series(rows.column("run_id").to_pylist()).isin(keep).to_numpy()),
                   partial / "runs.parquet")
    restore_journal(partial, tmp_path / "p")
    more = br.record(s, tmp_path / "p", command="test", log=lambda line: None)
    assert more["complete"] and more["recorded_now"] == len(old_runs) - len(keep) > 0
    assert sorted(r["run_id"] for r in bt.load_journal(tmp_path / "p")[2]) == sorted(r["run_id"] for r in old_runs)


def test_a_restore_refuses_a_run_this_code_does_not_draw(recorded, tmp_path):
    import shutil

    import pyarrow as pa

    from kgtuner.bench.restore import restore_journal

    _, _, tables, _ = recorded
    bad = tmp_path / "bad"
    shutil.copytree(tables, bad)
    rows = pq.read_table(bad / "runs.parquet").to_pylist()
    cfg = json.loads(rows[0]["config_json"])
    cfg["lr"] = cfg["lr"] * 2
    rows[0]["config_json"] = json.dumps(cfg, sort_keys=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=bt.RUN_SCHEMA), bad / "runs.parquet")
    with pytest.raises(ConfigError, match=f"run {rows[0]['run_id']}'s configuration differs"):
        restore_journal(bad, tmp_path / "j")
    assert not (tmp_path / "j" / "journal.jsonl").exists()


def test_the_command_line_restores_a_journal(recorded, tmp_path, capsys):
    from kgtuner.cli import main

    _, _, tables, _ = recorded
    assert main(["bench", "restore", "--table", str(tables), "--out", str(tmp_path / "j")]) == 0
    assert f"-> {tmp_path / 'j' / 'journal.jsonl'}" in capsys.readouterr().out
    assert main(["bench", "restore", "--table", str(tables), "--out", str(tmp_path / "j")]) == 2
    assert "already holds a journal" in capsys.readouterr().err


def test_a_live_recording_is_refused_unless_its_journal_was_restored_since(recorded, tmp_path):
    """The last session's pid runs `bench record`: the journal is being recorded, and a second recorder is refused;
    once the journal has been rebuilt from its table (a restore record after that session), the pid is another
    machine's and does not count."""
    from kgtuner.bench.restore import restore_journal

    _, _, tables, _ = recorded
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "bench", "record"])
    try:
        journal = tmp_path / "j"
        restore_journal(tables, journal)
        records = br.Journal(journal / "journal.jsonl").read()
        sessions = [dict(r, pid=live.pid) if r.get("kind") == "session" else r for r in records]
        with pytest.raises(ConfigError, match=f"still running \\(pid {live.pid}"):
            br._refuse_if_running([r for r in sessions if r.get("kind") != "restore"])
        br._refuse_if_running(sessions)  # the restore record comes after the session: no refusal
    finally:
        live.kill()
        live.wait()


def test_the_benchmark_script_refuses_a_journal_older_than_its_committed_table(recorded, tmp_path):
    """A journal that lacks runs the committed table holds (recorded on elsewhere) is not continued."""
    from kgtuner.bench.restore import missing_from_journal, restore_journal

    _, out, tables, _ = recorded
    assert missing_from_journal(tables, out) == []
    journal = tmp_path / "old"
    restore_journal(tables, journal)
    lines = (journal / "journal.jsonl").read_text().splitlines()
    runs = [i for i, line in enumerate(lines) if '"kind": "run"' in line]
    dropped = json.loads(lines[runs[-1]])["run_id"]
    (journal / "journal.jsonl").write_text("\n".join(lines[:runs[-1]] + lines[runs[-1] + 1:]) + "\n")
    assert missing_from_journal(tables, journal) == [dropped]
    env = {**os.environ, "DATASET": "demo", "JOURNALS": str(tmp_path), "TABLES": str(tables.parent),
           "KGTUNER": str(Path(sys.executable).with_name("kgtuner"))}
    (tmp_path / tables.name).mkdir(exist_ok=True)
    (journal / "journal.jsonl").replace(tmp_path / tables.name / "journal.jsonl")
    proc = subprocess.run(["bash", "scripts/benchmarks/replay_benchmark.sh", tables.name], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4 and f"holds 1 run(s) the journal in {tmp_path / tables.name} lacks" in proc.stderr


def test_a_journal_continues_under_a_legacy_or_differing_fingerprint_when_its_runs_are_this_codes(recorded):
    """Journals written before floats were rounded for the fingerprint carry its legacy form; a fingerprint that
    differs otherwise (a last-bit difference across numpy builds) is settled run by run."""
    s, out, _, _ = recorded
    header, _, runs = bt.load_journal(out)
    pools = bp.Pools(s, header["dataset"])
    br.check_header({**header, "fingerprint": pools.fingerprint(legacy=True)}, s, pools, runs)
    br.check_header({**header, "fingerprint": {"stage1": "0" * 16}}, s, pools, runs)
    with pytest.raises(ConfigError, match="draws other pools"):
        br.check_header({**header, "fingerprint": {"stage1": "0" * 16}}, s, pools, [])
    moved = [dict(r, config={**r["config"], "lr": r["config"]["lr"] * (1 + 1e-12)}) for r in runs]
    assert pools.mismatches(moved) == []  # an ulp-sized difference is the same configuration
    bad = [dict(runs[0], config={**runs[0]["config"], "lr": runs[0]["config"]["lr"] * 1.01})]
    with pytest.raises(ConfigError, match="configuration differs"):
        br.check_header({**header, "fingerprint": {"stage1": "0" * 16}}, s, pools, bad)
    renamed = [dict(runs[0], run_id=runs[0]["run_id"].replace("-s0", "-s7"))]
    assert "does not name its pool" in pools.mismatches(renamed)[0]


def test_the_pilot_times_runs_into_its_own_file_and_reuses_them(tmp_path):
    """`kgtuner bench pilot`: its runs go to pilot.jsonl (never the journal), an estimate comes back, and a second
    call with the same settings trains nothing again."""
    s = tiny()
    first = bpl.pilot(s, tmp_path, per_pool=1, pools=["stage1"], log=lambda line: None)
    runs = [r for r in br.Journal(tmp_path / "pilot.jsonl").read() if r.get("kind") == "run"]
    assert len(runs) == 1 and not (tmp_path / "journal.jsonl").exists()
    assert first == bpl.pilot(s, tmp_path, per_pool=1, pools=["stage1"], log=lambda line: pytest.fail("trained again"))
    assert len(br.Journal(tmp_path / "pilot.jsonl").read()) == 1
