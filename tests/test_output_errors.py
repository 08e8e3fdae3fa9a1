"""Outputs that cannot be written (issue 42): a run directory (``hydra.run.dir``) or ``--out`` folder that is an
existing file, lies on a read-only file system or is not writable ends every command that writes one --
``kgtuner launch``, ``kgtuner train``, ``kgtuner bench replay/record`` -- with ONE ``kgtuner: error:`` line naming
the path and the fix, exit status 2, no traceback, and nothing written or changed."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.serial  # kgtuner launches (each ends before Ray starts): one at a time (make test)

REPO = Path(__file__).resolve().parents[1]
TINY = ("budget=trials", "budget.trials=3", "cluster.num_cpus=1", "cluster.include_dashboard=false")
COMMANDS = {"launch": ("kgtuner.launch", *TINY), "train": ("kgtuner.train", "train.max_steps=10")}


def _run(command: str, run_dir, *extra, timeout=120):
    module, *args = COMMANDS[command]
    return subprocess.run([sys.executable, "-m", module, *args, *extra, f"hydra.run.dir={run_dir}"], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def _one_line(code: int, stderr: str, stdout: str = "") -> str:
    """The one ``kgtuner: error:`` line of a refused command (exit 2, no traceback)."""
    assert code == 2, stdout[-2000:] + stderr[-3000:]
    lines = [ln for ln in stderr.splitlines() if ln.startswith("kgtuner: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def read_only():
    """``make(folder)``: ``folder`` (its files written already) becomes read-only -- without write permission
    for a normal user, a read-only bind mount as root (root ignores permissions); skipped where neither works
    (``test_an_unwritable_run_directory_met_by_hydra_is_one_line_at_the_unit_level`` covers it there)."""
    undo = []

    def make(folder: Path) -> Path:
        if os.geteuid() != 0:
            dirs = [folder, *(p for p in folder.rglob("*") if p.is_dir())]
            for d in dirs:
                d.chmod(0o555)
            undo.append(lambda: [d.chmod(0o755) for d in dirs])
        else:
            bind = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
            if bind.returncode != 0:
                pytest.skip(f"no read-only mount here (mount --bind: {bind.stderr.strip()})")
            undo.append(lambda: subprocess.run(["umount", str(folder)], capture_output=True))
            ro = subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True, text=True)
            if ro.returncode != 0:
                pytest.skip(f"no read-only mount here (remount,ro: {ro.stderr.strip()})")
        try:
            (folder / ".probe").write_text("x")
        except OSError:
            return folder
        pytest.skip(f"{folder} stayed writable")

    yield make
    for step in reversed(undo):
        step()


# ---------------------------------------------------------------------------------------------- an existing file
@pytest.mark.parametrize("below", [False, True], ids=["the-file", "below-the-file"])
@pytest.mark.parametrize("command", ["launch", "train"])
def test_a_run_directory_naming_an_existing_file_is_one_line(command, below, tmp_path):
    blocker = tmp_path / "results"
    blocker.write_text("keep me\n")
    run_dir = blocker / "run" if below else blocker
    proc = _run(command, run_dir)
    line = _one_line(proc.returncode, proc.stderr, proc.stdout)
    assert f"hydra.run.dir={run_dir}" in line and f"{blocker} is an existing file" in line, line
    assert "choose another hydra.run.dir" in line, line
    assert blocker.read_text() == "keep me\n"


# ---------------------------------------------------------------------------------------------- read-only
@pytest.mark.parametrize("command", ["launch", "train"])
def test_a_run_directory_on_a_read_only_mount_is_one_line(command, tmp_path, read_only):
    (tmp_path / "ro").mkdir()
    mount = read_only(tmp_path / "ro")
    run_dir = mount / "run"
    proc = _run(command, run_dir)
    line = _one_line(proc.returncode, proc.stderr, proc.stdout)
    assert f"hydra.run.dir={run_dir}" in line, line
    assert ("read-only file system" in line) if os.geteuid() == 0 else ("not writable" in line), line
    assert not run_dir.exists()


def test_resume_in_a_read_only_run_directory_is_one_line_and_changes_nothing(tmp_path, read_only):
    from hydra import compose, initialize_config_dir

    from kgtuner.paths import CONF_DIR
    from kgtuner.tune.run_dir import STATE_FILE, fingerprint, write_overrides
    from kgtuner.tune.settings import ExperimentSettings

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        settings = ExperimentSettings.from_config(compose(config_name="config", overrides=list(TINY)))
    (run_dir / STATE_FILE).write_text(json.dumps({"fingerprint": fingerprint(settings), "stage": 1, "elapsed_s": 3.0},
                                                 default=str))
    write_overrides(run_dir, list(TINY))
    before = _contents(run_dir)
    read_only(run_dir)
    proc = _run("launch", run_dir, "resume=true")
    line = _one_line(proc.returncode, proc.stderr, proc.stdout)
    assert f"hydra.run.dir={run_dir}" in line and "launch.log" in line, line  # Hydra's log file, its first write
    assert "resume it there (resume=true hydra.run.dir=<the copy>)" in line, line
    assert _contents(run_dir) == before


def test_an_unwritable_run_directory_met_by_hydra_is_one_line_at_the_unit_level(tmp_path, monkeypatch, capsys):
    """Where the directory is created (Hydra's ``Path.mkdir``), a read-only file system (EROFS) -- in process,
    so that it runs where no read-only mount can be made."""
    from kgtuner import launch, train

    run_dir = tmp_path / "ro" / "run"
    mkdir = pathlib.Path.mkdir

    def read_only_mkdir(self, *args, **kwargs):
        if Path(self) == run_dir or run_dir in Path(self).parents:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", read_only_mkdir)
    for main in (launch.main, train.main):
        with pytest.raises(SystemExit) as stop:
            main([*TINY, f"hydra.run.dir={run_dir}"] if main is launch.main else [f"hydra.run.dir={run_dir}"])
        err = capsys.readouterr().err
        line = _one_line(stop.value.code, err)
        assert f"hydra.run.dir={run_dir} is on a read-only file system" in line, line
    assert not run_dir.exists()


# ---------------------------------------------------------------------------------------------- kgtuner bench
@pytest.mark.parametrize("args", [
    ("replay", "--table", str(REPO / "docs" / "benchmarks" / "tables" / "demo"), "--algorithms", "random",
     "--workers", "1", "--budgets", "10", "--seeds", "1"),
    ("record", "--dataset", "demo", "--max-runs", "1"),
], ids=["replay", "record"])
def test_bench_out_naming_an_existing_file_is_one_line(args, tmp_path, capsys):
    from kgtuner.bench.cli import main

    out = tmp_path / "results"
    out.write_text("keep me\n")
    code = main([*args, "--out", str(out)])
    line = _one_line(code, capsys.readouterr().err)
    assert f"--out {out} cannot be a folder: {out} is an existing file" in line, line
    assert out.read_text() == "keep me\n"
