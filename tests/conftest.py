"""Shared test fixtures: locating the benchmark datasets in ``../shared/datasets``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATASETS = Path(os.environ.get("KGTUNER_SHARED_DATASETS", REPO_ROOT.parent / "shared" / "datasets"))


def shared_dataset(name: str) -> Path:
    """Path of ``../shared/datasets/NAME``; skips the test (with the reason shown) when it is absent."""
    path = SHARED_DATASETS / name
    if not (path / "train.txt").exists():
        pytest.skip(f"needs {path} (the team's shared datasets; absent in a fresh clone)")
    return path


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own processed-dataset cache so tests never see each other's files."""
    monkeypatch.setenv("KGTUNER_CACHE", str(tmp_path_factory.mktemp("kgtuner-cache")))


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one thread for a module: tiny models gain nothing from threads, and on a busy 2-core
    machine threads thrash. Use with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def recorded(tmp_path_factory):
    """A complete tiny recording of the demo graph and its report (``record_helpers.TINY``): ``(settings, journal
    folder, tables folder, record's summary)``, recorded once per test process and only read by the tests (the
    record and restore modules share it: splitting them records it no more often)."""
    from kgtuner.bench import record as br
    from kgtuner.bench import table as bt
    from record_helpers import tiny

    out = tmp_path_factory.mktemp("bench") / "demo"
    s = tiny()
    summary = br.record(s, out, command="test", log=lambda line: None)
    tables = out / "tables"
    bt.finalize(out, tables)
    return s, out, tables, summary


@pytest.fixture
def live():
    """A recording search driver (tests/tune_helpers.Recorder), active for the test: searchers and schedulers
    built without Ray send their events to it."""
    from tune_helpers import Recorder

    from kgtuner.tune import events

    rec = Recorder()
    events.activate(rec)
    yield rec
    events.deactivate(rec)


# --------------------------------------------------------------------------------- the pytest process's exit
_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session, exitstatus):
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """End the pytest process with pytest's own exit status once every report is written, skipping the
    interpreter's teardown. CI once ended a run whose 919 tests had all passed with a segmentation fault
    after pytest's last line (exit 139): a native extension loaded in this process (torch, Ray's core
    worker, pyarrow, scikit-learn's OpenMP) crashed while Python tore itself down. Nothing of the tests
    runs then, so the status stays the tests' own; ``make test`` runs with ``-X faulthandler``, which
    prints the Python stack of any crash before this point."""
    if _EXIT_STATUS:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])
