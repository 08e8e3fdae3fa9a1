"""The ``kgtuner`` console script and the error style all kgtuner commands share: a bad setting is one
``kgtuner: error:`` line naming the key/file at fault, exit status 2, no traceback, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgtuner.cli import ArgumentParser, error_line, main


def _kgtuner() -> list[str]:
    """The installed console script (next to this interpreter), else the same entry point as a module."""
    script = Path(sys.executable).with_name("kgtuner")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kgtuner.cli"]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run([*_kgtuner(), *args], cwd=cwd, capture_output=True, text=True, timeout=180, env=env)


@pytest.mark.parametrize("args,message", [
    (["launch", "budget.secs=1"], "Could not override 'budget.secs': Key 'secs' is not in struct"),
    (["launch", "search=nope"], "Could not find 'search/nope'; available options in 'search':"),
    (["launch", "budget.seconds=-3"], "budget.seconds must be a positive number of seconds"),
    (["train", "train.lr=-0.5"], "lr must be a number > 0"),
    (["train", "model=nope"], "Could not find 'model/nope'"),
    (["data", "stats", "no/such/folder"], "no/such/folder"),
    (["data", "subgraph", "demo", "--ratio", "lots"], "argument --ratio: invalid float value: 'lots'"),
    (["analysis", "stages", "no/such/run"], "no/such/run"),
    (["frobnicate"], "unknown command 'frobnicate'"),
])
def test_bad_settings_are_one_line_with_exit_2_from_any_directory(tmp_path, args, message):
    proc = _run(args, cwd=tmp_path)  # outside the checkout: the configs are found all the same
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgtuner: error: "), proc.stderr
    assert message in lines[0] and "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert not list(tmp_path.rglob("summary.json")) and not list(tmp_path.rglob("metrics.json"))


def test_help_version_and_module_entry_points(tmp_path, capsys):
    assert main(["--help"]) == 0
    assert "launch" in capsys.readouterr().out
    assert main([]) == 2
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("kgtuner 0.")
    # python -m kgtuner.launch keeps working as the README shows, with the same error style
    proc = subprocess.run([sys.executable, "-m", "kgtuner.launch", "budget.secs=1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2 and proc.stderr.startswith("kgtuner: error: Could not override 'budget.secs'")
    proc = _run(["launch", "--cfg", "job", "budget.seconds=7"], cwd=tmp_path)
    assert proc.returncode == 0 and "seconds: 7" in proc.stdout, proc.stderr


def test_error_line_condenses_hydra_reports():
    class Composition(Exception):
        pass

    exc = Composition("Could not override 'trial.cpus'.\nTo append to your config use +trial.cpus=3")
    exc.__cause__ = ValueError("Key 'cpus' is not in struct\n    full_key: trial.cpus\n    object_type=dict")
    assert error_line(exc) == ("kgtuner: error: Could not override 'trial.cpus': Key 'cpus' is not in struct; "
                               "To append to your config use +trial.cpus=3")
    missing = ("In 'config': Could not find 'model/x'\n\nAvailable options in 'model':\n\tcomplex\n\ttranse\n"
               "Config search path:\n\tprovider=hydra, path=pkg://hydra.conf")
    assert error_line(missing) == ("kgtuner: error: In 'config': Could not find 'model/x'; "
                                   "available options in 'model': complex, transe")


def test_argument_parser_usage_errors_share_the_style(capsys):
    parser = ArgumentParser(prog="kgtuner demo")
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["--n", "two"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == ("kgtuner: error: kgtuner demo: argument --n: invalid int value: 'two' "
                                       "(see kgtuner demo --help)\n")


def _one_line_exit_2(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgtuner: error: "), proc.stderr[-3000:]
    return lines[0]


def test_a_warm_start_row_without_a_stage_is_one_line_naming_the_file_and_row(tmp_path):
    """Issue 42: a NaN in a warm-start source's ``stage`` column was a ValueError traceback (exit 1)."""
    import numpy as np

    from kgtuner.search import load_space
    from kgtuner.tune.results import make_row, rows_to_frame

    space, rng = load_space("full", model="complex", dataset="demo"), np.random.default_rng(0)
    rows = [make_row(f"old{i}", 1, space.sample(rng), status="ok", valid={"mrr": 0.3}, graph="demo", trial_index=i)
            for i in range(4)]
    frame = rows_to_frame(rows)
    frame["stage"] = frame["stage"].astype(float)
    frame.loc[2, "stage"] = float("nan")
    run = tmp_path / "earlier"
    run.mkdir()
    frame.to_parquet(run / "trials.parquet")
    proc = _run(["launch", "cluster.include_dashboard=false", "search=rf_bore", f"search.warm_start=[{run}]"],
                cwd=tmp_path)
    line = _one_line_exit_2(proc)
    assert f"{run / 'trials.parquet'} row 2 (trial old2) has stage nan" in line, line
