"""report.html (issue 41, part 3): every section of a finished search for a person to read, self-contained (figures
as base64 PNG, nothing loaded from the network), for every kind of search (two-stage with stage pairs and their
SRCC, one-stage, GraSH, failed, no kept model); `kgtuner report RUN_DIR` rebuilds the same bytes; a bad run
directory is one `kgtuner: error:` line, exit 2; the launcher writes it at the end of a search (and a report that
fails costs a warning, never the outputs). Run directories are built with the real writers, not launched."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from kgtuner import cli
from kgtuner.analysis.report import HEADINGS, REPORT_FILE, build_report, importances, write_report
from kgtuner.tune.best_config import write_best_config
from kgtuner.tune.results import ResultsStore, make_row, metrics_of, write_summary

NODE = "a" * 56
ENTITIES = ["aspirin", "headache", "ibuprofen"]
RELATIONS = ["treats", "causes"]


def _metrics(x: float) -> dict:
    return {"mrr": x, "hits@1": x * 0.8, "hits@3": x * 0.9, "hits@10": min(1.0, x * 1.1)}


def _write_run(run: Path, *, search: str = "kgtuner", n1: int = 10, n2: int = 6, status: str = "ok",
               keep_model: bool = True, rounds: bool = False, seed: int = 0) -> Path:
    """A run directory as a finished search leaves it: trials.parquet (ResultsStore), summary.json
    (write_summary), best_config.yaml (write_best_config) and, with ``keep_model``, an embeddings.npz."""
    rng = np.random.default_rng(seed)
    store = ResultsStore(run)
    two_stage = search in ("kgtuner", "kgtuner_asha")
    size1 = {"batch_size": 128, "dim": 100} if two_stage else {}
    stage1 = []
    for i in range(n1):
        cfg = {"loss": ["CE", "BCE_mean", "BCE_adv"][i % 3], "lr": float(rng.uniform(1e-4, 0.1)),
               "negatives": ["kVsAll", 128][i % 2], "dropout": float(rng.uniform(0, 0.5)), **size1}
        if not two_stage:
            cfg.update(batch_size=int(rng.choice([256, 512])), dim=int(rng.choice([200, 400])))
        start, gpu = 2.0 * (i // 4), str(i % 4)
        kind = "failed" if i == 1 else "stopped" if i == 2 else "ok"
        mrr = None if kind == "failed" else float(rng.uniform(0.2, 0.8))
        store.add(make_row(f"s1t{i:03d}", 1, cfg, status=kind, valid=None if mrr is None else _metrics(mrr),
                           test=None if two_stage or mrr is None or kind == "stopped" else _metrics(mrr - 0.01),
                           error="Traceback ...\nRuntimeError: CUDA out of memory" if kind == "failed" else None,
                           start_s=start, end_s=start + 1.5 + 0.1 * i, node=NODE, node_ip="10.0.0.1", gpu=gpu,
                           graph="demo-sub" if two_stage else "demo", steps=50, trial_index=i,
                           rung=25 if kind == "stopped" else None), flush=False)
        if kind == "ok":
            stage1.append((mrr, cfg))
    stage1.sort(key=lambda p: -p[0])
    for j in range(n2 if two_stage else 0):
        parent = stage1[j % max(1, min(4, len(stage1)))][1]
        cfg = {**parent, "batch_size": [256, 512][j % 2], "dim": [200, 400][(j // 2) % 2]}
        rung = 25 if j == n2 - 1 else None  # kgtuner_asha: a stage-2 trial stopped at a rung
        mrr = float(rng.uniform(0.5, 0.95))
        start = 10.0 + 3.0 * j
        store.add(make_row(f"s2t{j:03d}", 2, cfg, status="stopped" if rung else "ok", valid=_metrics(mrr),
                           test=None if rung else _metrics(mrr - 0.02), start_s=start, end_s=start + 5.0, node=NODE,
                           node_ip="10.0.0.1", gpu=str(j % 4), graph="demo", steps=50, trial_index=n1 + j,
                           rung=rung), flush=False)
    store.flush()
    best = store.best(2 if two_stage else max(int(r["stage"]) for r in store.rows())) if len(store) else None
    summary = {
        "status": status, "error": "RayTaskError: the cluster went away" if status == "failed" else None,
        "search": search, "two_stage": two_stage, "model": "complex", "dataset": "demo",
        "best": None if best is None else {
            "trial_id": best["trial_id"], "stage": best["stage"], "config": json.loads(best["config_json"]),
            "valid": metrics_of(best, "valid"), "test": metrics_of(best, "test"), "graph": best["graph"],
            "train_seed": 7, "from_subgraph": False, "stage1_sizes": False,
            "strategy": {"description": f"{search}: the best trial"}},
        "warnings": [], "trials_per_stage": {k: sum(v.values()) for k, v in store.counts().items()},
        "status_per_stage": store.counts(),
        "budget": {"seconds": None, "trials": len(store), "used_s": 40.0, "extensions": []},
        "cluster": {"slots": 4, "resources_per_trial": {"cpu": 0.5, "gpu": 1.0}}, "final": None, "early_stop": None,
        "run_dir": str(run), "stage_switch_s": None, "stage2_started_s": 10.0 if two_stage else None,
        "stage2_top": 4 if two_stage else None, "stage2_candidates": 16 if two_stage else None}
    if rounds:
        summary["rounds"] = [{"round": 1, "graph_share": 0.25, "max_steps": 50, "configs": n1}]
    write_summary(run, summary)
    if best is not None:
        settings = SimpleNamespace(data={"name": "demo", "path": None, "unseen": None, "ogb_root": None},
                                   model={"name": "complex", "options": {}}, search_name=search)
        write_best_config(run / "best_config.yaml", settings, summary["best"]["config"],
                          {"max_steps": 50, "max_epochs": None}, seed=7)
    if keep_model:
        np.savez(run / "embeddings.npz", entity=np.zeros((3, 4), np.float32), relation=np.zeros((2, 4), np.float32),
                 entity_names=np.array(ENTITIES), relation_names=np.array(RELATIONS))
    return run


@pytest.fixture(scope="module")
def two_stage(tmp_path_factory) -> tuple[Path, str]:
    """A KGTuner run (a failed and a rung-stopped stage-1 trial, a rung-stopped stage-2 trial) and its report."""
    run = _write_run(tmp_path_factory.mktemp("two-stage") / "run")
    return run, write_report(run).read_text()


def _pngs(text: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)]


def _section(text: str, key: str) -> str:
    match = re.search(rf'<section id="{key}">(.*?)</section>', text, re.S)
    assert match, key
    return match.group(1)


def _values(fragment: str) -> list[float]:
    return [float(v) for v in re.findall(r'data-value="([^"]+)"', fragment)]


def _self_contained(text: str) -> None:
    assert "http://" not in text and "https://" not in text and "//cdn" not in text
    assert not re.search(r"<(script|link|iframe)\b", text)
    assert not re.search(r'src="(?!data:image/png;base64,)', text)


def test_two_stage_report_has_every_section_figures_and_the_stage_pairs(two_stage):
    run, text = two_stage
    for key in ("errors", "curve", "timeline", "top", "srcc", "importance", "answer"):
        assert f"<h2>{HEADINGS[key]}</h2>" in text, key
    pngs = _pngs(text)
    assert len(pngs) == 2 and all(p.startswith(b"\x89PNG\r\n\x1a\n") and len(p) > 5000 for p in pngs)
    _self_contained(text)
    # the top-configuration table: each stage-2 trial, its MRRs and its stage-1 parent's, as trials.parquet has them
    df = pd.read_parquet(run / "trials.parquet")
    mrr = dict(zip(df["trial_id"], df["valid_mrr"]))
    rows = re.findall(r"<tr><td>\d+</td><td class=l>(s2t\d+)</td>(.*?)</tr>", _section(text, "top"))
    assert len(rows) == (df["stage"] == 2).sum() == 6
    strip = lambda c: json.dumps({k: v for k, v in json.loads(c).items() if k not in ("batch_size", "dim")},
                                 sort_keys=True)
    s1 = df[(df.stage == 1) & (df.status != "failed") & df.rung.isna()]
    pairs = []
    for trial, cells in rows:
        row = df[df.trial_id == trial].iloc[0]
        parent = s1[s1.config_json.map(strip) == strip(row["config_json"])].sort_values("valid_mrr").iloc[-1]
        values = _values(cells)  # full-graph valid MRR, test MRR (none for a trial stopped at a rung), subgraph MRR
        assert values[0] == row["valid_mrr"] == mrr[trial] and values[-1] == parent["valid_mrr"]
        assert values[1:-1] == ([] if pd.isna(row["test_mrr"]) else [row["test_mrr"]])
        assert f"<td class=l>{parent['trial_id']}</td>" in cells
        if pd.isna(row["rung"]):
            pairs.append((parent["valid_mrr"], row["valid_mrr"]))
    assert [full for _, full in pairs] == sorted((full for _, full in pairs), reverse=True)
    # SRCC over the fully trained pairs = scipy's
    srcc = _section(text, "srcc")
    assert re.search(r'id="srcc-n">(\d+)<', srcc).group(1) == str(len(pairs)) == "5"
    assert _values(srcc)[0] == pytest.approx(spearmanr(*zip(*pairs)).statistic, abs=1e-12)
    # the failed trial's error; the importances of stage 1 (8 ok trials) and stage 2 (5 ok trials)
    assert "RuntimeError: CUDA out of memory" in _section(text, "errors")
    imp = _section(text, "importance")
    assert "<h3>stage 1</h3>" in imp and "<h3>stage 2</h3>" in imp and "<td class=l>loss</td>" in imp


def test_the_answer_says_how_to_use_it_with_the_run_dir_and_real_names(two_stage):
    run, text = two_stage
    run = run.resolve()
    answer = _section(text, "answer")
    summary = json.loads((run / "summary.json").read_text())
    assert f"<b>{summary['best']['trial_id']}</b>" in answer
    assert _values(answer)[:4] == [summary["best"]["valid"][k] for k in ("mrr", "hits@1", "hits@3", "hits@10")]
    predict = re.search(r'<pre id="predict">(.*?)</pre>', answer).group(1)
    assert predict == f"kgtuner predict {run} --head aspirin --relation treats --top 10"
    load = re.search(r'<pre id="load-model">(.*?)</pre>', answer, re.S).group(1)
    assert f"kgtuner.load_model(&quot;{run}&quot;)" in load and "&quot;aspirin&quot;, &quot;treats&quot;" in load
    assert f"kgtuner train --config-dir {run} --config-name best_config" in answer
    for key, value in summary["best"]["config"].items():
        shown = repr(value) if isinstance(value, float) else str(value)  # the exact value, to copy
        assert f"<td class=l>{key}</td><td class=l>{shown}</td>" in answer


def test_kgtuner_report_rebuilds_the_same_bytes(two_stage, tmp_path, capsys):
    run, text = two_stage
    assert cli.main(["report", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run.resolve() / REPORT_FILE)
    assert (run / REPORT_FILE).read_text() == text
    out = tmp_path / "elsewhere" / "r.html"
    assert cli.main(["report", str(run), "--out", str(out)]) == 0
    assert out.read_bytes() == (run / REPORT_FILE).read_bytes()


@pytest.mark.parametrize("search", ["random", "rf_bore", "tpe"])
def test_a_one_stage_search_without_a_kept_model(tmp_path, search):
    run = _write_run(tmp_path / "run", search=search, n1=6, keep_model=False)
    text = build_report(run)
    assert "one-stage search" in _section(text, "top") and "no subgraph/full-graph pairs" in text
    assert "Not a two-stage search" in _section(text, "srcc")
    answer = _section(text, "answer")
    assert 'id="predict"' not in answer and "answer.keep=0" in answer
    assert f"kgtuner train --config-dir {run} --config-name best_config" in answer
    assert len(_pngs(text)) == 2 and "Skipped: only 4 ok trial(s)" in _section(text, "importance")
    _self_contained(text)


def test_grash_and_kgtuner_asha(tmp_path):
    text = build_report(_write_run(tmp_path / "grash", search="grash", n1=6, rounds=True))
    assert "GraSH" in _section(text, "top") and len(_pngs(text)) == 2
    asha = build_report(_write_run(tmp_path / "asha", search="kgtuner_asha", n1=6, n2=3))
    assert 'id="pairs"' in asha and "the rank correlation needs at least 3" in _section(asha, "srcc")


def test_a_failed_search_shows_what_is_known(tmp_path):
    text = build_report(_write_run(tmp_path / "run", status="failed", n1=5, n2=0))
    assert "FAILED" in text and "RayTaskError: the cluster went away" in _section(text, "errors")
    assert "No stage-2 trial has a validation MRR" in _section(text, "top")
    empty = tmp_path / "empty"
    _write_run(empty, status="failed", n1=0, n2=0, keep_model=False)
    text = build_report(empty)
    assert "No trial has finished yet." in text and "No answer" in _section(text, "answer") and not _pngs(text)
    for key in ("errors", "curve", "timeline", "top", "srcc", "importance", "answer"):
        assert f"<h2>{HEADINGS[key]}</h2>" in text, key


def test_importances_of_hundreds_of_trials_are_fast(tmp_path):
    run = _write_run(tmp_path / "run", search="random", n1=300, keep_model=False)
    frame = ResultsStore.load(run).frame()
    started = time.perf_counter()
    (stage, table, note), = importances(frame)
    assert time.perf_counter() - started < 4.0  # about 1 s on a busy core
    assert stage == 1 and table.attrs["n_trials"] == 298 and set(table["hp"]) >= {"loss", "lr"}


@pytest.mark.parametrize("case", ["missing", "no-summary", "garbled-summary", "garbled-trials"])
def test_a_bad_run_directory_is_one_error_line(tmp_path, capsys, case):
    run = tmp_path / "run"
    if case != "missing":
        run.mkdir()
    if case == "garbled-summary":
        (run / "summary.json").write_text("{not json")
    if case == "garbled-trials":
        _write_run(run, search="random", n1=5)
        (run / "trials.parquet").write_bytes(b"PAR1 garbage")
    assert cli.main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kgtuner: error: ") and err.count("\n") == 1 and str(run.resolve()) in err


def _driver(run: Path, logs: list) -> SimpleNamespace:
    return SimpleNamespace(store=ResultsStore.load(run), answer=SimpleNamespace(finish=lambda s, d: s),
                           run_dir=run, log=logs.append, verbose=False, out=sys.stdout,
                           settings=SimpleNamespace(budget=SimpleNamespace(timed=False, end_s=float("inf")),
                                                    tracker=SimpleNamespace(on=False)),
                           strategy=SimpleNamespace(stage_labels=lambda: None))


def test_write_outputs_writes_the_report_and_a_failing_one_costs_a_warning(tmp_path, monkeypatch):
    from kgtuner.analysis import report
    from kgtuner.tune import outputs

    run = _write_run(tmp_path / "run", search="random", n1=5)
    summary = json.loads((run / "summary.json").read_text())
    summary["best"] = None  # best_config.yaml stays as it is
    monkeypatch.setattr(outputs, "experiment_summary", lambda driver: summary)
    logs: list[str] = []
    outputs.write_outputs(_driver(run, logs))
    assert (run / REPORT_FILE).is_file() and any(REPORT_FILE in line for line in logs)
    (run / REPORT_FILE).unlink()

    def broken(run_dir, out=None):
        raise RuntimeError("no fonts")
    monkeypatch.setattr(report, "write_report", broken)
    logs.clear()
    outputs.write_outputs(_driver(run, logs))
    assert not (run / REPORT_FILE).exists()
    assert (run / "summary.json").is_file() and (run / "search_curve.png").is_file()
    assert any(line.startswith("warning: report.html could not be written (RuntimeError: no fonts)") for line in logs)


SHORT = ("cluster.num_gpus=2", "budget=trials", "budget.trials=6", "search.top_k=2", "trial.stage1.max_steps=50",
         "trial.stage1.valid_every=50", "trial.stage2.max_steps=50", "trial.stage2.valid_every=50",
         "trial.checkpoint_every_s=0", "cluster.include_dashboard=false")


@pytest.mark.serial
@pytest.mark.slow
def test_the_launcher_writes_the_report(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "kgtuner.launch", f"hydra.run.dir={run}", *SHORT], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"[kgtuner] report: {run / REPORT_FILE}" in proc.stdout
    text = (run / REPORT_FILE).read_text()
    for key in ("curve", "timeline", "top", "srcc", "importance", "answer"):
        assert f"<h2>{HEADINGS[key]}</h2>" in text, key
    assert len(_pngs(text)) == 2 and 'id="pairs"' in text and f"kgtuner predict {run} --head " in text
    _self_contained(text)
