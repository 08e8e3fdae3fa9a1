"""Using the answer (issue 41): `kgtuner.load_model` rebuilds the trained model of a run directory from its files
with kgtuner's own scorer classes (every model reproduces the test metrics of its metrics.json), answers queries
by name (ranked tails/heads, triple scores, embeddings), filters the graph's known triples on request, streams a
file of triples in batches; `kgtuner predict` prints TSV/JSON; bad input is one `kgtuner: error:` line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kgtuner.errors import ConfigError, KGTunerError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MODEL_NAMES = ("transe", "rotate", "rescal", "distmult", "complex", "tucker", "conve", "autosf")
BASE = ["train.dim=16", "train.max_epochs=null", "train.max_steps=10", "train.valid_every=5", "train.batch_size=512"]
#: the ComplEx run is a decent model of the demo graph (test MRR ~0.8 after 120 steps, well under a second)
DECENT = ["train.dim=64", "train.negatives=kVsAll", "train.loss=CE", "train.inverse=true", "train.max_steps=120",
          "train.valid_every=40", "train.regularizer=None"]


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def runs(tmp_path_factory, one_torch_thread) -> dict[str, Path]:
    """Output directories of `kgtuner train` (in-process, Hydra and all) for every model on the demo graph, plus
    "search": a search-style run directory (best_config.yaml by kgtuner's writer + the ComplEx model files)."""
    from kgtuner import train
    from kgtuner.tune.best_config import write_best_config

    root = tmp_path_factory.mktemp("runs")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KGTUNER_CACHE", str(root / "cache"))
        for name in MODEL_NAMES:
            extra = DECENT if name == "complex" else []
            train.main([*BASE, f"model={name}", *extra, f"hydra.run.dir={root / name}"])
            out[name] = root / name
    search = root / "search"
    search.mkdir()
    for f in ("metrics.json", "embeddings.npz"):
        (search / f).write_bytes((out["complex"] / f).read_bytes())
    cfg = json.loads((search / "metrics.json").read_text())["config"]
    settings = SimpleNamespace(data={"name": "demo", "path": None, "unseen": None, "ogb_root": None},
                               model={"name": "complex", "options": {}}, search_name="kgtuner")
    write_best_config(search / "best_config.yaml", settings,
                      {k: cfg[k] for k in ("dim", "negatives", "loss", "lr", "inverse", "regularizer")},
                      {"max_steps": cfg["max_steps"], "max_epochs": None}, seed=0)
    out["search"] = search
    return out


def _tiny_run(root: Path, *, dim: int = 4, model: str = "distmult", with_config: bool = True) -> Path:
    """A hand-made run directory (no training): DistMult over 4 animals and 2 relations, and a folder graph."""
    from kgtuner.kge import TrainConfig

    graph = root / "graph"
    graph.mkdir(parents=True, exist_ok=True)
    (graph / "train.txt").write_text("dog\teats\tfish\ncat\teats\tfish\ncat\tlikes\tdog\nbird\tlikes\tcat\n")
    (graph / "valid.txt").write_text("dog\tlikes\tcat\n")
    (graph / "test.txt").write_text("cat\teats\tbird\n")
    run = root / "run"
    run.mkdir(parents=True, exist_ok=True)
    config = TrainConfig.from_dict({"model": model, "dim": dim}).to_dict()
    (run / "metrics.json").write_text(json.dumps({"status": "ok", "valid": None, "test": None, "config": config}))
    rng = np.random.default_rng(0)
    np.savez(run / "embeddings.npz", entity=rng.normal(size=(4, 4)).astype(np.float32),
             relation=rng.normal(size=(2, 4)).astype(np.float32),
             entity_names=np.array(["fish", "dog", "cat", "bird"]), relation_names=np.array(["likes", "eats"]))
    if with_config:
        (run / "best_config.yaml").write_text(
            f"data:\n  name: folder\n  path: {graph}\nmodel:\n  name: {model}\n  options: {{}}\ntrain:\n  dim: {dim}\n")
    return run


@pytest.fixture
def tiny(tmp_path) -> Path:
    return _tiny_run(tmp_path)


def _predict(args, capsys) -> tuple[int, str, str]:
    from kgtuner.cli import main

    try:
        code = main(["predict", *map(str, args)])
    except SystemExit as stop:  # argparse's usage errors end the parse (kgtuner.cli.ArgumentParser)
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------------------------- every model, exactly
@pytest.mark.slow
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_model_reproduces_the_test_metrics_of_its_run(runs, name):
    from kgtuner import load_model
    from kgtuner.kge.models import MODELS

    lm = load_model(runs[name])
    metrics = json.loads((runs[name] / "metrics.json").read_text())
    assert type(lm.model) is MODELS[name]  # the registry's scorer class, the one that trained it
    assert lm.config.model == name and lm.num_entities == 135 and lm.num_relations == 46
    got = lm.evaluate("test")  # the graph comes from the run's .hydra/config.yaml (data: demo)
    assert got.keys() == metrics["test"].keys()
    assert all(abs(got[k] - metrics["test"][k]) < 1e-9 for k in got), (got, metrics["test"])

    # rankings and triple scores come from the same scorer: the top tails' scores are their triple scores
    head, rel = "acquired_abnormality", "affects"
    top = lm.predict_tails(head, rel, top=5)
    assert len(top) == 5 and [p.score for p in top] == sorted((p.score for p in top), reverse=True)
    assert np.allclose(lm.score_triples(head, rel, [p.name for p in top]), [p.score for p in top], atol=1e-4)
    if not lm.model.inverse:  # with reciprocal relations a head query scores (t, r^-1, ?) instead
        heads = lm.predict_heads(rel, "activity", top=3)
        assert np.allclose(lm.score_triples([p.id for p in heads], rel, "activity"), [p.score for p in heads],
                           atol=1e-4)
    emb = np.load(runs[name] / "embeddings.npz", allow_pickle=False)
    assert np.array_equal(lm.entity_embeddings(["activity", 3]), emb["entity"][[lm.entity_id("activity"), 3]])
    assert lm.entity_embeddings("activity").shape == (lm.config.dim,)


@pytest.mark.slow
def test_search_run_directory_and_the_independent_scorer(runs):
    """A search's run directory (best_config.yaml names the graph) loads the same model; its test MRR is the one
    the tests' own numpy scorer (tests/answer_helpers.py) computes from embeddings.npz."""
    from answer_helpers import complex_filtered_ranks

    from kgtuner import load_model

    lm = load_model(runs["search"] / "embeddings.npz")  # a file of the run names the run too
    assert lm.data == {"name": "demo", "path": None, "unseen": None, "ogb_root": None}
    ranks = complex_filtered_ranks(runs["search"] / "embeddings.npz")
    assert abs(lm.evaluate("test")["mrr"] - float(np.mean(1.0 / ranks))) < 1e-6
    assert lm.evaluate("test") == json.loads((runs["search"] / "metrics.json").read_text())["test"]


# ------------------------------------------------------------------------------------------------ predict
@pytest.mark.slow
def test_predict_on_the_demo_graph_puts_known_true_tails_near_the_top(runs):
    from kgtuner import load_model

    lm = load_model(runs["complex"])
    kg, known = lm.graph(), lm.known_triples()
    test = kg.test[:150]  # held out from training
    # the best answers are true facts of the graph (top 5: ~93% of them; the top one: ~99%)
    precision = [known.contains([[h, r, p.id] for p in lm.predict_tails(int(h), int(r), top=5)]).mean()
                 for h, r, _ in test]
    assert np.mean(precision) > 0.8, np.mean(precision)
    # the held-out tail (head) is near the top, among the query's other true answers (UMLS has many per query)
    tails = [int(t) in {p.id for p in lm.predict_tails(int(h), int(r), top=20)} for h, r, t in test]
    assert np.mean(tails) > 0.65, np.mean(tails)
    heads = [int(h) in {p.id for p in lm.predict_heads(int(r), int(t), top=20)} for h, r, t in test]
    assert np.mean(heads) > 0.65, np.mean(heads)

    # filter_known: only new answers, and as many as asked for
    h, r = str(kg.entities[kg.train[0, 0]]), str(kg.relations[kg.train[0, 1]])
    true_tails = set(known.true_tails([lm.entity_id(h)], [lm.relation_id(r)])[1].tolist())
    fresh = lm.predict_tails(h, r, top=20, filter_known=True)
    assert len(fresh) == 20 and not true_tails & {p.id for p in fresh}
    everything = lm.predict_tails(h, r, top=None, filter_known=True)
    assert len(everything) == lm.num_entities - len(true_tails)
    assert [p.id for p in everything[:20]] == [p.id for p in fresh]


@pytest.mark.slow
def test_a_file_of_100k_triples_is_scored_in_batches(runs, tmp_path, monkeypatch):
    """score_tsv reads, scores and yields one batch at a time: score_spo sees at most batch_size triples, the
    all-entity scorers never run, the reader is not ahead of the batch, and Python's peak memory stays small."""
    from kgtuner import load_model
    from kgtuner.predict import score_tsv

    lm = load_model(runs["complex"])
    rng = np.random.default_rng(1)
    n, batch = 100_000, 4096
    h, t = rng.integers(0, lm.num_entities, n), rng.integers(0, lm.num_entities, n)
    r = rng.integers(0, lm.num_relations, n)
    path = tmp_path / "triples.tsv"
    path.write_text("".join(f"{lm.entity_names[a]}\t{lm.relation_names[b]}\t{lm.entity_names[c]}\n"
                            for a, b, c in zip(h, r, t)))

    seen, score_spo = [], lm.model.score_spo

    def recording(hh, rr, tt):
        seen.append(len(hh))
        return score_spo(hh, rr, tt)

    def refuse(*args, **kwargs):
        raise AssertionError("a triple file must not be scored against every entity")

    monkeypatch.setattr(lm.model, "score_spo", recording)
    monkeypatch.setattr(lm.model, "score_sp", refuse)
    monkeypatch.setattr(lm.model, "score_po", refuse)
    read = [0]

    def lines(handle):
        for line in handle:
            read[0] += 1
            yield line

    with path.open() as handle:
        tracemalloc.start()
        stream = score_tsv(lm, lines(handle), batch_size=batch, source=str(path))
        first = next(stream)
        assert read[0] <= batch  # the first batch is answered before the rest of the file is read
        count, last = 1, first
        for last in stream:
            count += 1
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert count == n and max(seen) <= batch and len(seen) == -(-n // batch) and sum(seen) == n
    assert peak < 8 * 2**20, peak  # the 100k rows as Python tuples alone would take ~30 MiB
    assert first[:3] == (str(lm.entity_names[h[0]]), str(lm.relation_names[r[0]]), str(lm.entity_names[t[0]]))
    monkeypatch.undo()
    expected = lm.score_triples(h[[0, -1]], r[[0, -1]], t[[0, -1]])
    assert np.allclose([first[3], last[3]], expected, atol=1e-6)
    assert lm.triples_batch_size() >= 1024  # the default batch of a dim-64 model: thousands, not all triples


# ------------------------------------------------------------------------------------------------ the CLI
@pytest.mark.slow
def test_cli_prints_tsv_and_json(runs, capsys, tmp_path):
    from kgtuner import load_model

    run = runs["complex"]
    lm = load_model(run)
    code, out, err = _predict([run, "--head", "acquired_abnormality", "--relation", "affects", "--top", "4"], capsys)
    assert code == 0 and err == ""
    lines = out.strip().splitlines()
    assert lines[0] == "rank\tname\tid\tscore" and len(lines) == 5
    rows = [line.split("\t") for line in lines[1:]]
    expected = lm.predict_tails("acquired_abnormality", "affects", top=4)
    assert [(row[1], int(row[2])) for row in rows] == [(p.name, p.id) for p in expected]
    assert np.allclose([float(row[3]) for row in rows], [p.score for p in expected], rtol=1e-6)

    code, out, _ = _predict([run, "--relation", "affects", "--tail", "activity", "--json", "--filter-known"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["predict"] == "head" and doc["filter_known"] is True and doc["model"] == "complex"
    expected = lm.predict_heads("affects", "activity", top=10, filter_known=True)
    assert [(p["rank"], p["name"], p["id"]) for p in doc["predictions"]] == [
        (i, p.name, p.id) for i, p in enumerate(expected, 1)]

    triples = tmp_path / "few.tsv"
    triples.write_text("activity\taffects\tage_group\n\nage_group\tanalyzes\tactivity\n")  # a blank line is skipped
    code, out, _ = _predict([run, "--triples", triples, "--batch-size", "1"], capsys)
    assert code == 0 and out.splitlines()[0] == "head\trelation\ttail\tscore"
    scored = [line.split("\t") for line in out.splitlines()[1:]]
    assert [row[:3] for row in scored] == [["activity", "affects", "age_group"], ["age_group", "analyzes", "activity"]]
    assert np.allclose([float(row[3]) for row in scored],
                       lm.score_triples(["activity", "age_group"], ["affects", "analyzes"], ["age_group", "activity"]),
                       rtol=1e-6)
    code, out, _ = _predict([run, "--triples", triples, "--json"], capsys)
    assert code == 0 and [json.loads(line)["tail"] for line in out.splitlines()] == ["age_group", "activity"]


def test_cli_unknown_name_is_one_line_naming_the_nearest_names(tiny, capsys):
    code, out, err = _predict([tiny, "--head", "dgo", "--relation", "eats"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("kgtuner: error: unknown entity 'dgo'; nearest known names: 'dog'")
    code, _, err = _predict([tiny, "--relation", "Likes", "--tail", "cat"], capsys)
    assert code == 2 and "nearest known names: 'likes'" in err and err.count("\n") == 1
    bad = tiny.parent / "bad.tsv"
    bad.write_text("dog\teats\tfish\ndog\teats\twhale\n")
    code, _, err = _predict([tiny, "--triples", bad], capsys)
    assert code == 2 and f"{bad}:2: unknown entity 'whale'" in err and err.count("\n") == 1


@pytest.mark.parametrize("args,message", [
    (["--relation", "eats"], "give --head H --relation R (best tails), --relation R --tail T"),
    (["--head", "dog", "--relation", "eats", "--tail", "cat"], "give --head H --relation R"),
    (["--triples", "x.tsv", "--head", "dog"], "--triples scores a file; it takes no --head"),
    (["--head", "dog", "--relation", "eats", "--top", "0"], "--top must be >= 1"),
    (["--triples", "no/such.tsv"], "--triples no/such.tsv: cannot read it"),
])
def test_cli_usage_errors_are_one_line(tiny, capsys, args, message):
    code, out, err = _predict([tiny, *args], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err
    assert err.startswith("kgtuner: error: ")


@pytest.mark.slow
def test_module_entry_point_exit_2_without_traceback(tiny, tmp_path):
    """`python -m kgtuner.predict` (`kgtuner predict` is kgtuner.cli.main, run in-process above): an unknown name
    is one line, exit 2, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "kgtuner.predict", str(tiny), "--head", "catt", "--relation", "eats"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == ["kgtuner: error: unknown entity 'catt'; nearest known names: 'cat'"]


# ------------------------------------------------------------------------------------ the Python API, cheap
def test_tiny_run_answers_by_name_and_id_and_filters_its_folder_graph(tiny, capsys):
    from kgtuner import load_model

    lm = load_model(tiny)
    emb = np.load(tiny / "embeddings.npz", allow_pickle=False)
    scores = emb["entity"][2] * emb["relation"][1] @ emb["entity"].T  # DistMult (cat, eats, ?) by hand
    ranked = lm.predict_tails("cat", "eats", top=None)
    assert [p.id for p in ranked] == list(np.argsort(-scores, kind="stable"))
    assert np.allclose([p.score for p in ranked], scores[[p.id for p in ranked]], atol=1e-6)
    assert lm.predict_tails(2, 1, top=2) == ranked[:2]  # ids work as names do
    # the folder graph numbers its entities differently: filtering maps by name (cat eats fish in train, bird in test)
    assert {p.name for p in lm.predict_tails("cat", "eats", top=None, filter_known=True)} == {"dog", "cat"}
    assert {p.name for p in lm.predict_heads("likes", "cat", top=None, filter_known=True)} == {"fish", "cat"}
    assert lm.score_triples(["cat", "dog"], "eats", "fish").shape == (2,)
    code, out, _ = _predict([tiny, "--head", "cat", "--relation", "eats", "--filter-known", "--json"], capsys)
    assert code == 0 and {p["name"] for p in json.loads(out)["predictions"]} == {"dog", "cat"}
    assert lm.evaluate("test")["mrr"] > 0
    with pytest.raises(KGTunerError, match="same length"):
        lm.score_triples(["cat", "dog"], ["eats"] * 3, "fish")
    with pytest.raises(KGTunerError, match=r"entity id 9 is out of range \[0, 4\)"):
        lm.predict_tails(9, "eats")
    with pytest.raises(ConfigError, match="top must be a whole number >= 1"):
        lm.predict_tails("cat", "eats", top=0)


def test_bad_run_directories_are_one_clear_error(tmp_path):
    from kgtuner import load_model

    with pytest.raises(ConfigError, match="does not exist: give the run directory"):
        load_model(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=f"no metrics.json in {empty}"):
        load_model(empty)
    answerless = tmp_path / "answerless"
    answerless.mkdir()
    (answerless / "best_config.yaml").write_text("data: {name: demo}\n")
    with pytest.raises(KGTunerError, match="no trained model .*kgtuner train --config-dir .* --config-name best_config"):
        load_model(answerless)
    diverged = tmp_path / "diverged"
    diverged.mkdir()
    (diverged / "metrics.json").write_text(json.dumps({"status": "diverged", "message": "training loss became NaN "
                                                       "at step 7", "config": {"model": "complex"}}))
    with pytest.raises(KGTunerError, match=r"the run diverged \(training loss became NaN at step 7\), so it has no "
                                           "embeddings.npz"):
        load_model(diverged)


def test_files_that_do_not_match_are_refused(tmp_path):
    from kgtuner import load_model

    run = _tiny_run(tmp_path / "dim")
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["config"]["dim"] = 8
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "best_config.yaml").unlink()
    with pytest.raises(ConfigError, match=r"embeddings.npz: 'entity' has shape \(4, 4\).*model distmult, dim 8.*"
                                          "different runs"):
        load_model(run)

    run = _tiny_run(tmp_path / "other", with_config=False)
    (run / "best_config.yaml").write_text("model: {name: complex}\ntrain: {dim: 4}\n")
    with pytest.raises(ConfigError, match=r"best_config.yaml \(model='complex'\) and .*metrics.json "
                                          r"\(model='distmult'\) describe different models"):
        load_model(run)

    run = _tiny_run(tmp_path / "rescal", model="rescal", with_config=False)  # relation rows must be dim x dim
    with pytest.raises(ConfigError, match=r"'relation' has shape \(2, 4\).*model rescal"):
        load_model(run)


class _Touch:
    """Unpickling it would create ``path``: proof that load_model never unpickles."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_model_files_are_never_unpickled(tmp_path):
    from kgtuner import load_model

    run = _tiny_run(tmp_path)
    marker = tmp_path / "unpickled"
    arrays = dict(np.load(run / "embeddings.npz", allow_pickle=False))
    arrays["entity_names"] = np.array([_Touch(marker)] * 4, dtype=object)
    np.savez(run / "embeddings.npz", **arrays)
    with pytest.raises(ConfigError, match="holds an array that needs pickle"):
        load_model(run)
    assert not marker.exists()
    (run / "embeddings.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="cannot be read as a .npz file"):
        load_model(run)


def test_the_graph_is_loaded_only_for_filtering(tmp_path):
    from kgtuner import load_model

    run = _tiny_run(tmp_path, with_config=False)
    lm = load_model(run, device="cpu")
    assert lm.predict_tails("cat", "eats", top=1)  # no graph needed
    with pytest.raises(ConfigError, match="does not say which graph the model was trained on"):
        lm.predict_tails("cat", "eats", filter_known=True)
    lm = load_model(run, data=tmp_path / "graph")  # a folder given by hand
    assert "fish" not in {p.name for p in lm.predict_tails("cat", "eats", top=None, filter_known=True)}
    gone = _tiny_run(tmp_path / "moved")
    import shutil

    shutil.rmtree(tmp_path / "moved" / "graph")
    with pytest.raises(ConfigError, match=r"cannot load the graph .*best_config.yaml.*is not a folder"):
        load_model(gone).predict_tails("cat", "eats", filter_known=True)
    with pytest.raises(ConfigError, match="device 'cuda:99' cannot hold the model"):
        load_model(run, device="cuda:99")


def test_import_kgtuner_stays_light():
    """kgtuner.load_model is resolved on first use: `import kgtuner` (and kgtuner.model) do not import torch."""
    out = subprocess.run([sys.executable, "-c", "import sys, kgtuner, kgtuner.model; print('torch' in sys.modules, "
                          "'load_model' in dir(kgtuner.model))"], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True"], out.stderr
