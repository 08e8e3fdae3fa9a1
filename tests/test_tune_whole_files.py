"""kgtuner.tune.whole_files: Tune's experiment state reaches the run directory whole (issue 42's soak found a
truncated ``experiment_state-*.json`` after a full disk, and then every resume was refused).

The full disk is real here: the copy runs in a child process whose file-size limit (``RLIMIT_FSIZE``) is below
the new file's size, so its writes fail part-way with EFBIG as they would with ENOSPC. The same child first runs
Ray's own copy, which must leave the truncated file (the control: the instrument sees the defect).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.fs
import pytest

from kgtuner.tune import whole_files

OLD = {"trial_data": ["old"], "runner_data": {}}
NEW = {"trial_data": ["x" * 1000] * 200, "runner_data": {}}  # about 200 kB
LIMIT = 50_000  # bytes a process may write into one file: the old state fits, the new one does not

CHILD = textwrap.dedent("""
    import json, resource, signal, sys
    import pyarrow.fs
    from ray.train._internal import storage
    from kgtuner.tune import whole_files
    staging, dest, mode = sys.argv[1:4]
    if mode == "kgtuner":
        whole_files.install()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
    try:
        storage._upload_to_fs_path(local_path=staging, fs=pyarrow.fs.LocalFileSystem(), fs_path=dest)
    except OSError as err:
        print("copy failed:", err)
""").format(limit=LIMIT)


def _copy_with_full_disk(tmp_path: Path, mode: str) -> Path:
    staging, dest = tmp_path / mode / "staging", tmp_path / mode / "search"
    staging.mkdir(parents=True)
    dest.mkdir(parents=True)
    (dest / "experiment_state-s1.json").write_text(json.dumps(OLD))
    (staging / "experiment_state-s1.json").write_text(json.dumps(NEW))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(staging), str(dest), mode], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "copy failed" in proc.stdout, proc.stdout  # the limit did cut the copy
    return dest


def test_a_copy_cut_by_a_full_disk_leaves_the_previous_state_whole(tmp_path):
    ray_dest = _copy_with_full_disk(tmp_path, "ray")
    with pytest.raises(json.JSONDecodeError):  # control: Ray's own copy truncates the file it replaces
        json.loads((ray_dest / "experiment_state-s1.json").read_text())

    dest = _copy_with_full_disk(tmp_path, "kgtuner")
    assert json.loads((dest / "experiment_state-s1.json").read_text()) == OLD
    assert sorted(p.name for p in dest.iterdir()) == ["experiment_state-s1.json"]  # no temporary file left


def _tree(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("exclude", [None, ["*.pkl"], ["trial_a/*"], ["*/result.json"]])
def test_the_copy_holds_what_rays_copy_holds(tmp_path, exclude):
    """The same files as Ray's ``_upload_to_fs_path`` (Ray's exclusion rule included), only written whole."""
    from ray.train._internal import storage

    staging = tmp_path / "staging"
    for name, text in {"experiment_state-s.json": "{}", "searcher-state-s.pkl": "p", "trial_a/result.json": "r",
                       "trial_a/params.json": "q", "trial_b/deep/x.pkl": "z"}.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_text(text)
    ray_upload = whole_files._RAY_UPLOAD[0] if whole_files.installed() else storage._upload_to_fs_path
    ray_upload(local_path=str(staging), fs=pyarrow.fs.LocalFileSystem(), fs_path=str(tmp_path / "ray"),
               exclude=exclude)
    whole_files.upload_whole_files(str(staging), pyarrow.fs.LocalFileSystem(), str(tmp_path / "ours"), exclude)
    assert _tree(tmp_path / "ours") == _tree(tmp_path / "ray")
    assert _tree(tmp_path / "ours")  # the comparison compares something


def test_a_copy_cut_by_a_kill_leaves_no_partial_file_behind(tmp_path):
    staging, dest = tmp_path / "staging", tmp_path / "search"
    staging.mkdir()
    (staging / "experiment_state-s.json").write_text("{}")
    dest.mkdir()
    (dest / ".experiment_state-s.json.0123456789ab.partial").write_text('{"trun')  # a kill -9 mid-copy
    whole_files.upload_whole_files(str(staging), pyarrow.fs.LocalFileSystem(), str(dest))
    assert sorted(p.name for p in dest.iterdir()) == ["experiment_state-s.json"]


def test_the_driver_installs_it_through_rays_syncer(tmp_path):
    """``configure_tune`` (the coordinator calls it before any Tuner) routes Ray's own syncer through it."""
    from ray.train._internal.storage import _FilesystemSyncer

    from kgtuner.tune.progress import configure_tune

    configure_tune()
    assert whole_files.installed()
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "experiment_state-s.json").write_text('{"a": 1}')
    calls = []
    original = whole_files.copy_whole
    whole_files.copy_whole = lambda src, dst: (calls.append(Path(dst).name), original(src, dst))
    try:
        syncer = _FilesystemSyncer(storage_filesystem=pyarrow.fs.LocalFileSystem(), sync_period=0)
        syncer.sync_up(str(staging), str(tmp_path / "search"))
        syncer.wait()
    finally:
        whole_files.copy_whole = original
    assert calls == ["experiment_state-s.json"]
    assert json.loads((tmp_path / "search" / "experiment_state-s.json").read_text()) == {"a": 1}
