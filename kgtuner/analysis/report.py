"""``report.html``: a finished search for a person to read, built from its run directory's files alone.

``write_report(run_dir)`` reads ``summary.json``, ``trials.parquet`` (and ``embeddings.npz``'s names, with
``np.load(allow_pickle=False)``) and writes one self-contained HTML file: no scripts, fonts or images from the
network; the figures (:mod:`kgtuner.analysis.report_figures`) are embedded base64 PNGs. Its sections
(:data:`HEADINGS`): the best-so-far curve of each stage, the timeline of the trial slots, the top configurations
(for KGTuner: each stage-2 trial beside its stage-1 parent, the same hyper-parameters but batch_size/dim), the
subgraph-vs-full-graph SRCC over those pairs (:func:`kgtuner.analysis.srcc.spearman`), hyper-parameter
importances (:func:`kgtuner.analysis.importance.hp_importance`, a small forest: about a second for hundreds of
trials), the answer and how to use it, and the errors of a failed search or failed trials. The same files give
the same bytes (no timestamp), so ``kgtuner report RUN_DIR`` rebuilds exactly the file the search wrote.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kgtuner.errors import DataError

REPORT_FILE = "report.html"
#: The headings of the report's sections, in order (Errors only where a search or a trial failed).
HEADINGS = {"errors": "Errors", "curve": "Best validation MRR so far", "timeline": "Trial timeline",
            "top": "Top configurations", "srcc": "Subgraph vs full-graph ranking",
            "importance": "Hyper-parameter importance", "answer": "The answer and how to use it"}
#: Rows of the top-configuration table.
TOP_ROWS = 15
#: Pairs needed for the SRCC; importances: at most this many trials per stage (a fixed sample beyond).
MIN_PAIRS = 3
MAX_IMPORTANCE_TRIALS = 600
EXPANDED = ("batch_size", "dim")

CSS = """body{font-family:sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ddd;padding:2px 6px;
text-align:right}th{background:#f3f3f3}td.l,th.l{text-align:left}img{max-width:100%;border:1px solid #eee}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto}.note{color:#555}.failed{color:#b00}
.bar{display:inline-block;height:.8em;background:#4c72b0}.warn{color:#a60}.wide{overflow-x:auto}
.row{display:flex;flex-wrap:wrap;gap:0 2.5em}"""


@dataclass
class RunFiles:
    """What a run directory holds for the report: its path, summary.json, trial rows (NaN as None) and table,
    and the answer's entity/relation names (None without a readable embeddings.npz)."""

    run_dir: Path
    summary: dict
    rows: list[dict]
    frame: pd.DataFrame
    names: tuple[list[str], list[str]] | None
    names_note: str = ""


def load_run(run_dir: str | os.PathLike) -> RunFiles:
    """The run directory's files; DataError (one line, naming the file) when it is not a finished search."""
    from kgtuner.tune.results import SUMMARY_FILE, ResultsStore

    path = Path(os.path.expanduser(str(run_dir))).resolve()
    if not path.is_dir():
        raise DataError(f"{path}: no such run directory; pass the hydra.run.dir of a kgtuner search")
    summary_path = path / SUMMARY_FILE
    if not summary_path.is_file():
        raise DataError(f"{path}: no {SUMMARY_FILE}: not a finished kgtuner search (a search writes it when it ends; "
                        "resume an interrupted one with resume=true)")
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{summary_path} cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(summary, dict) or "search" not in summary:
        raise DataError(f"{summary_path}: not a kgtuner summary (a JSON object with 'search', 'best', ...)")
    store = ResultsStore.load(path)  # DataError for a garbled trials.parquet
    rows = store.rows()
    names, note = None, ""
    emb = path / "embeddings.npz"
    if emb.is_file():
        try:
            with np.load(emb, allow_pickle=False) as arrays:
                names = ([str(x) for x in arrays["entity_names"][:1]], [str(x) for x in arrays["relation_names"][:1]])
            if not names[0] or not names[1]:
                names, note = None, f"{emb.name} names no entity or relation"
        except Exception as exc:  # noqa: BLE001 - a broken model file costs the example lines, not the report
            names, note = None, f"{emb.name} cannot be read ({type(exc).__name__})"
    return RunFiles(path, summary, rows, store.frame(), names, note)


# ------------------------------------------------------------------------------------------------ the data
def _config(row: dict) -> dict:
    from kgtuner.analysis.trials import META_KEYS

    return {k: v for k, v in json.loads(row["config_json"]).items() if k not in META_KEYS}


def _has_mrr(row: dict) -> bool:
    return row["status"] != "failed" and row.get("valid_mrr") is not None


def stage_pairs(rows: list[dict]) -> list[dict]:
    """Each stage-2 trial with a validation MRR beside its stage-1 parent (the same configuration but
    batch_size/dim; the best fully-trained one when it ran more than once), best full-graph MRR first. Keys:
    ``trial``, ``full_mrr``, ``test_mrr``, ``parent`` / ``sub_mrr`` (None without a parent), ``rung``
    (a stage-2 trial stopped early), ``config``."""
    from kgtuner.analysis.srcc import DEFAULT_IGNORE, match_key

    parents: dict[str, dict] = {}
    for row in rows:
        if row["stage"] == 1 and _has_mrr(row):
            key = match_key(_config(row), ignore=DEFAULT_IGNORE)
            old = parents.get(key)
            rank = (row.get("rung") is None, row["valid_mrr"])
            if old is None or rank > (old.get("rung") is None, old["valid_mrr"]):
                parents[key] = row
    out = []
    for row in rows:
        if row["stage"] == 2 and _has_mrr(row):
            cfg = _config(row)
            parent = parents.get(match_key(cfg, ignore=DEFAULT_IGNORE))
            out.append({"trial": row["trial_id"], "full_mrr": row["valid_mrr"], "test_mrr": row.get("test_mrr"),
                        "rung": row.get("rung"), "parent": None if parent is None else parent["trial_id"],
                        "sub_mrr": None if parent is None else parent["valid_mrr"],
                        "parent_rung": None if parent is None else parent.get("rung"), "config": cfg})
    out.sort(key=lambda p: (-p["full_mrr"], p["trial"]))
    return out


def srcc_pairs(pairs: list[dict]) -> list[tuple[float, float]]:
    """``(subgraph MRR, full-graph MRR)`` of the pairs the SRCC is taken over: both fully trained."""
    return [(p["sub_mrr"], p["full_mrr"]) for p in pairs
            if p["sub_mrr"] is not None and p["rung"] is None and p["parent_rung"] is None]


def importances(frame: pd.DataFrame) -> list[tuple[int, pd.DataFrame | None, str]]:
    """``(stage, table, note)`` for the (at most two) stages with the most ``ok`` trials; ``table`` is
    :func:`~kgtuner.analysis.importance.hp_importance`'s with a small forest (50 trees, 5 permutations), None
    with the reason in ``note`` when the stage has too few trials."""
    from kgtuner.analysis.importance import MIN_TRIALS, hp_importance

    if frame.empty:
        return []
    ok = frame[(frame["status"] == "ok") & frame["valid_mrr"].notna() & frame["rung"].isna()]
    counts = ok["stage"].value_counts()
    stages = sorted(int(s) for s in sorted(counts.index, key=lambda s: (-counts[s], s))[:2])
    if not stages:
        stages = sorted(int(s) for s in frame["stage"].unique())[:1]
    out = []
    for stage in stages:
        n = int(counts.get(stage, 0))
        if n < MIN_TRIALS:
            out.append((stage, None, f"only {n} ok trial(s); importances need at least {MIN_TRIALS}"))
            continue
        part = ok[ok["stage"] == stage]
        note = ""
        if n > MAX_IMPORTANCE_TRIALS:
            part = part.sample(n=MAX_IMPORTANCE_TRIALS, random_state=0)
            note = f"a fixed sample of {MAX_IMPORTANCE_TRIALS} of its {n} ok trials"
        try:
            table = hp_importance(part.reset_index(drop=True), n_estimators=50, n_repeats=5, statuses=("ok",))
        except Exception as exc:  # noqa: BLE001 - one analysis failing leaves the rest of the report
            out.append((stage, None, f"not computed ({type(exc).__name__}: {exc})"))
            continue
        out.append((stage, table, note))
    return out


# ------------------------------------------------------------------------------------------------ HTML parts
def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _num(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        return str(x)
    x = float(x)
    if x.is_integer() and abs(x) < 1e9:
        return str(int(x))
    return f"{x:.{digits}f}" if abs(x) >= 1e-3 else f"{x:.{digits - 1}e}"


def _mrr_cell(x) -> str:
    """A metric cell: 4 decimals shown, the exact value in ``data-value``."""
    if x is None:
        return "<td>-</td>"
    return f'<td data-value="{float(x)!r}">{float(x):.4f}</td>'


def _table(head: list[str], body: list[list[str]], left: set[int] = frozenset()) -> str:
    """Rows of ready-made ``<td>`` cells (or plain text, escaped) under a header."""
    def cell(i, c):
        return c if c.startswith("<td") else f'<td{" class=l" if i in left else ""}>{_e(c)}</td>'
    ths = "".join(f'<th{" class=l" if i in left else ""}>{_e(h)}</th>' for i, h in enumerate(head))
    trs = "".join("<tr>" + "".join(cell(i, c) for i, c in enumerate(r)) + "</tr>\n" for r in body)
    return f'<div class="wide"><table>\n<tr>{ths}</tr>\n{trs}</table></div>'


def _img(png: bytes | None, alt: str, missing: str) -> str:
    if png is None:
        return f'<p class="note">{_e(missing)}</p>'
    return f'<p><img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}"></p>'


def _section(key: str, body: str) -> str:
    return f'<section id="{key}">\n<h2>{_e(HEADINGS[key])}</h2>\n{body}\n</section>'


def _stage_labels(summary: dict) -> dict[int, str] | None:
    """GraSH's round labels (as its strategy gives search_curve.png), from summary.json's ``rounds``."""
    rounds = summary.get("rounds")
    if not isinstance(rounds, list):
        return None
    return {int(r["round"]): f"round {r['round']} ({r.get('graph_share', 0):.3g} of the entities, "
            f"{r.get('max_steps')} steps)" for r in rounds if isinstance(r, dict) and "round" in r}


def _header(run: RunFiles) -> str:
    s = run.summary
    budget = s.get("budget") or {}
    amount = f"{_num(budget.get('seconds'))} s" if budget.get("seconds") else f"{_num(budget.get('trials'))} trials"
    status = s.get("status") or "ok"
    counts = s.get("status_per_stage") or {}
    per = "; ".join(f"stage {k}: " + ", ".join(f"{n} {st}" for st, n in v.items()) for k, v in sorted(counts.items()))
    kind = ("two-stage (stage 1 on a subgraph, stage 2 on the full graph)" if s.get("two_stage") else
            "GraSH rounds on growing subgraphs" if s.get("rounds") else "one stage on the full graph")
    facts = [("status", f"<b class=failed>FAILED</b>: {_e(s.get('error'))}" if status == "failed" else _e(status)),
             ("search", _e(f"{s.get('search')}: {kind}")), ("dataset / model", _e(f"{s.get('dataset')} / "
                                                                                 f"{s.get('model')}")),
             ("budget", _e(f"{amount}; used {_num(budget.get('used_s'), 1)} active s")),
             ("trials", _e(f"{len(run.rows)} ({per})" if per else str(len(run.rows)))),
             ("trial slots", _e((s.get("cluster") or {}).get("slots", "-"))), ("run directory", _e(run.run_dir))]
    if s.get("two_stage") and s.get("stage2_top") is not None:
        facts.append(("stage 2", _e(f"top {s.get('stage2_top')} stage-1 configurations, "
                                    f"{s.get('stage2_candidates')} candidates; started at "
                                    f"{_num(s.get('stage2_started_s'), 1)} s")))
    if s.get("early_stop"):
        facts.append(("early stopping", _e(f"{s['early_stop'].get('scheduler')}: {s['early_stop'].get('stopped')} "
                                           "trial(s) stopped at a rung")))
    rows = "".join(f"<tr><th class=l>{k}</th><td class=l>{v}</td></tr>\n" for k, v in facts)
    title = f"kgtuner report: {s.get('search')} on {s.get('dataset')} / {s.get('model')}"
    return f"<h1>{_e(title)}</h1>\n<table>\n{rows}</table>"


def _errors(run: RunFiles) -> str | None:
    failed = [r for r in run.rows if r["status"] == "failed"]
    if run.summary.get("status") != "failed" and not failed:
        return None
    parts = []
    if run.summary.get("status") == "failed":
        parts.append(f'<p class="failed">The search failed: {_e(run.summary.get("error"))}. The sections below show '
                     "what it had done by then.</p>")
    if failed:
        body = [[r["trial_id"], str(r["stage"]), _num(r.get("end_s"), 1),
                 ((r.get("error") or "no error recorded").strip().splitlines() or ["?"])[-1][:300]]
                for r in failed[:30]]
        parts.append(f"<p>{len(failed)} failed trial(s)" + (" (the first 30)" if len(failed) > 30 else "") + ":</p>")
        parts.append(_table(["trial", "stage", "ended (s)", "error (last line)"], body, left={0, 3}))
    return _section("errors", "\n".join(parts))


def _curve(run: RunFiles) -> str:
    from kgtuner.analysis.report_figures import curve_png

    s = run.summary
    png = curve_png(run.rows, switch_s=s.get("stage_switch_s"), budget_s=(s.get("budget") or {}).get("seconds"),
                    title=f"{s.get('search')}: {s.get('dataset')} / {s.get('model')}", stage_labels=_stage_labels(s))
    note = ("<p class=note>Each stage's trials (dots) and best validation MRR so far (steps) against active seconds. "
            + ("Stage 1 is measured on the subgraph and stage 2 on the full graph: separate series, not one "
               "scale.</p>" if s.get("two_stage") else "</p>"))
    return _section("curve", note + _img(png, "best validation MRR so far per stage", "No trial has finished yet."))


def _timeline(run: RunFiles) -> str:
    from kgtuner.analysis.report_figures import timeline_png

    s = run.summary
    png = timeline_png(run.rows, stage_labels=_stage_labels(s),
                       switch_s=s.get("stage_switch_s") if s.get("stage_switch_s") is not None
                       else s.get("stage2_started_s"))
    note = ("<p class=note>One row per trial slot (trials.parquet's <code>gpu</code>, per node when there are "
            "several), a bar from each trial's start to its end; colour: stage; solid: ok, hatched: stopped, "
            "cross-hatched with a red edge: failed. The dashed line: the start of stage 2.</p>")
    return _section("timeline", note + _img(png, "timeline of the trial slots", "No trial has a start and an end."))


def _hp(v) -> str:
    """A hyper-parameter value: 4 significant digits for a float."""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _hp_cells(cfg: dict, keys: list[str]) -> list[str]:
    return [_hp(cfg[k]) if k in cfg else "" for k in keys]


def _hp_keys(configs: list[dict], first: tuple[str, ...] = ()) -> list[str]:
    keys = list(first)
    for cfg in configs:
        keys += [k for k in cfg if k not in keys]
    return keys


def _top(run: RunFiles, pairs: list[dict]) -> str:
    s = run.summary
    if s.get("two_stage") and pairs:
        shown = pairs[:TOP_ROWS]
        keys = _hp_keys([p["config"] for p in shown], EXPANDED)
        body = [[str(i), p["trial"], _mrr_cell(p["full_mrr"]), _mrr_cell(p["test_mrr"]), p["parent"] or "-",
                 _mrr_cell(p["sub_mrr"]), *_hp_cells(p["config"], keys)] for i, p in enumerate(shown, 1)]
        head = ["#", "stage-2 trial", "full-graph valid MRR", "test MRR", "stage-1 parent", "subgraph MRR", *keys]
        note = (f"<p class=note>The {len(shown)} best of {len(pairs)} stage-2 trials (full graph) by validation MRR, "
                "each beside its stage-1 parent: the subgraph trial of the same configuration but batch_size and "
                "dim.</p>")
        return _section("top", note + '<div id="pairs">' + _table(head, body, left={1, 4}) + "</div>")
    cands = sorted([r for r in run.rows if _has_mrr(r)],
                   key=lambda r: (-r["stage"], r.get("rung") is not None, -r["valid_mrr"], r["trial_id"]))[:TOP_ROWS]
    if s.get("two_stage"):
        note = "<p class=note>No stage-2 trial has a validation MRR: no subgraph/full-graph pairs.</p>"
    elif s.get("rounds"):
        note = ("<p class=note>GraSH: successive halving over rounds on growing subgraphs, not KGTuner's two stages: "
                "no stage-1/stage-2 pairs. The best trials, last round first.</p>")
    else:
        note = (f"<p class=note>{_e(s.get('search'))} is a one-stage search: every trial trained on the full graph, "
                "so there are no subgraph/full-graph pairs. Its best trials:</p>")
    if not cands:
        return _section("top", note + "<p class=note>No trial has a validation MRR.</p>")
    cfgs = [_config(r) for r in cands]
    keys = _hp_keys(cfgs, EXPANDED)
    body = [[str(i), r["trial_id"], str(r["stage"]), r["status"], _mrr_cell(r["valid_mrr"]),
             _mrr_cell(r.get("test_mrr")), *_hp_cells(c, keys)] for i, (r, c) in enumerate(zip(cands, cfgs), 1)]
    head = ["#", "trial", "stage", "status", "valid MRR", "test MRR", *keys]
    return _section("top", note + '<div id="best-trials">' + _table(head, body, left={1, 3}) + "</div>")


def _srcc(run: RunFiles, pairs: list[dict]) -> str:
    from kgtuner.analysis.srcc import spearman

    if not run.summary.get("two_stage"):
        return _section("srcc", "<p class=note>Not a two-stage search: no subgraph/full-graph pairs to rank.</p>")
    matched = srcc_pairs(pairs)
    if len(matched) < MIN_PAIRS:
        return _section("srcc", f"<p class=note>{len(matched)} subgraph/full-graph pair(s): the rank correlation "
                        f"needs at least {MIN_PAIRS}.</p>")
    rho = spearman([a for a, _ in matched], [b for _, b in matched])
    value = ("undefined (one side ranks every pair the same)" if not math.isfinite(rho)
             else f'<b id="srcc-value" data-value="{rho!r}">{rho:.4f}</b>')
    text = (f"<p>Spearman rank correlation (SRCC) of the subgraph MRR against the full-graph MRR over the "
            f"<span id=\"srcc-n\">{len(matched)}</span> pairs above: {value} (1: the subgraph ranks these "
            "configurations as the full graph does; 0: no relation between the two rankings).</p>")
    try:
        from kgtuner.analysis.srcc import stage_consistency

        res, _ = stage_consistency(run.frame)
        text += (f"<p class=note>Per stage-1 configuration (the best of its stage-2 expansions; "
                 f"<code>kgtuner analysis stages RUN_DIR</code>): SRCC {_num(res.srcc)} over {res.n} "
                 "configurations.</p>")
    except Exception:  # noqa: BLE001 - the pairs' SRCC stands on its own
        pass
    return _section("srcc", text)


def _importance(run: RunFiles) -> str:
    parts = ["<p class=note>A random forest fit on each stage's ok trials against validation MRR (50 trees): "
             "permutation importance (drop of R² when one hyper-parameter is shuffled) and impurity share. "
             "<code>kgtuner analysis importance RUN_DIR --stage N</code> fits a larger forest.</p>"]
    found, blocks = importances(run.frame), []
    if not found:
        parts.append("<p class=note>No trials: nothing to rank.</p>")
    for stage, table, note in found:
        head = f"<h3>stage {stage}" + (f" ({_e(note)})" if note and table is not None else "") + "</h3>"
        if table is None:
            blocks.append(f"<div>{head}<p class=note>Skipped: {_e(note)}.</p></div>")
            continue
        varied = table[table["values"] > 1]
        top = max(float(varied["permutation"].max()), 1e-12) if len(varied) else 1.0
        body = [[r.hp, f'<td class=l><span class="bar" style="width:{max(0.0, r.permutation) / top * 150:.0f}px">'
                 f"</span> {_num(r.permutation, 3)}</td>", _num(r.impurity, 3), str(r.values)]
                for r in varied.itertuples()]
        constant = sorted(set(table["hp"]) - set(varied["hp"]))
        blocks.append(f"<div>{head}<p class=note>{table.attrs.get('n_trials')} trials; forest in-sample R² "
                      f"{_num(table.attrs.get('r2'), 3)}.</p>"
                      + _table(["hyper-parameter", "permutation", "impurity", "distinct values"], body, left={0})
                      + (f"<p class=note>Constant in this stage: {_e(', '.join(constant))}.</p>" if constant else "")
                      + "</div>")
    if blocks:
        parts.append('<div class="row">\n' + "\n".join(blocks) + "\n</div>")
    return _section("importance", "\n".join(parts))


def _answer(run: RunFiles) -> str:
    s, best = run.summary, run.summary.get("best")
    if not best:
        return _section("answer", "<p class=note>No answer: no trial finished with a validation MRR.</p>")
    strategy = best.get("strategy") if isinstance(best.get("strategy"), dict) else {}
    parts = [f"<p>Trial <b>{_e(best.get('trial_id'))}</b> (stage {_e(best.get('stage'))}, graph "
             f"{_e(best.get('graph'))})" + (f": {_e(strategy.get('description'))}" if strategy else "") + ".</p>"]
    metrics = [[split, *[_mrr_cell((best.get(split) or {}).get(k)) for k in ("mrr", "hits@1", "hits@3", "hits@10")]]
               for split in ("valid", "test")]
    parts.append(_table(["split", "MRR", "hits@1", "hits@3", "hits@10"], metrics, left={0}))
    config = [[k, repr(v) if isinstance(v, float) else str(v)] for k, v in (best.get("config") or {}).items()]
    parts.append(_table(["hyper-parameter", "value (exact)"], config, left={0, 1}))
    final = s.get("final")
    if final:
        parts.append(f"<p>Retrained with {_e(final.get('seeds'))} seeds: test MRR {_num(final.get('test_mrr_mean'))} "
                     f"± {_num(final.get('test_mrr_std'))}.</p>")
    for warning in s.get("warnings") or []:
        parts.append(f'<p class="warn">Warning: {_e(warning)}</p>')
    run_q = shlex.quote(str(run.run_dir))
    if run.names is not None:
        head, rel = run.names[0][0], run.names[1][0]
        cmd = f"kgtuner predict {run_q} --head {shlex.quote(head)} --relation {shlex.quote(rel)} --top 10"
        py = (f"import kgtuner\n\nmodel = kgtuner.load_model({json.dumps(str(run.run_dir))})\n"
              f"model.predict_tails({json.dumps(head)}, {json.dumps(rel)}, top=10)   # best tails, by name\n"
              'model.evaluate("test")                     # == metrics.json["test"]')
        parts.append("<p>Its trained model is in the run directory (<code>embeddings.npz</code>, "
                     "<code>metrics.json</code>). The 10 best tails of a query, from the shell and from Python "
                     f"(names from <code>embeddings.npz</code>):</p>\n<pre id=\"predict\">{_e(cmd)}</pre>\n"
                     f"<pre id=\"load-model\">{_e(py)}</pre>")
    else:
        why = run.names_note or "no embeddings.npz: the search kept no trained model (answer.keep=0)"
        parts.append(f"<p class=note>No trained model to query here ({_e(why)}). Retrain the answer (below); "
                     "<code>kgtuner predict</code> and <code>kgtuner.load_model</code> then work on the training's "
                     "output directory.</p>")
    if (run.run_dir / "best_config.yaml").is_file():
        retrain = f"kgtuner train --config-dir {run_q} --config-name best_config"
        parts.append("<p>Retrain it (the answer's own seed; <code>train.seed=N</code> for another, "
                     "<code>hydra.run.dir=DIR</code> to choose where):</p>\n"
                     f"<pre id=\"retrain\">{_e(retrain)}</pre>")
    return _section("answer", "\n".join(parts))


def build_report(run_dir: str | os.PathLike) -> str:
    """The report of ``run_dir`` as an HTML string (DataError when it is not a finished search)."""
    run = load_run(run_dir)
    pairs = stage_pairs(run.rows) if run.summary.get("two_stage") else []
    sections = [_errors(run), _curve(run), _timeline(run), _top(run, pairs), _srcc(run, pairs), _importance(run),
                _answer(run)]
    title = f"kgtuner report: {run.summary.get('search')} on {run.summary.get('dataset')}"
    body = "\n".join(part for part in (_header(run), *sections) if part)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{_e(title)}</title>\n'
            f"<style>\n{CSS}\n</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


def write_report(run_dir: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Write ``report.html`` into ``run_dir`` (or to ``out``), atomically; return its path."""
    text = build_report(run_dir)
    path = Path(out) if out is not None else Path(os.path.expanduser(str(run_dir))).resolve() / REPORT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
