"""Issue 38's fair benchmark: the converged tables being recorded under one protocol, and the ``fair`` grid replayed
on them, cell by cell.

Reads, under the page's data folder (``docs/benchmarks/``), each converged table's ``card.json``
(``tables/<graph>/``, written by ``kgtuner bench report``) and each graph's ``fair`` replay journal
(``replay/<graph>/fair/journal.jsonl``, ``kgtuner bench replay --study fair``); a partial table or journal is shown
as far as it goes, and a graph without a table says so. ``section()`` is the part of ``docs/benchmarks.md`` that
``scripts/benchmarks/benchmarks_page.py`` writes from them; :func:`fair_verdicts` and :func:`recording_state` feed
the page's summary and the README's block.

The comparison rule, fixed here before the replays (:data:`RULE`; nothing in it is tuned to the results):

- a cell is one (graph, workers, budget); its searches are compared on the seeds every ranked algorithm of it has
  (:func:`kgtuner.bench.compare.common_seeds`); a search without a full-graph answer scores
  :data:`kgtuner.bench.compare.NO_ANSWER_MRR`;
- per other algorithm of the grid (the miss brackets ``[on_miss=lose]`` are KGTuner's and KGTuner+ASHA's own
  replays, not rivals): its test MRR minus KGTuner's, mean over the paired seeds, and the exact two-sided Wilcoxon
  signed-rank p (:func:`kgtuner.bench.compare.wilcoxon_p`, through ``stage2.paired``);
- the verdict is :func:`kgtuner.bench.compare.cell_verdicts` at :data:`ALPHA`: KGTuner *behind* an algorithm when
  its paired difference is negative at p < ALPHA with the mean and the signed ranks on the same side, under every
  stage-2 mapping the cell replayed (misses replaced by the nearest expansion, and lost); *ahead* the other way;
- a search that ran out of its pool in a cell (``repeats > 0`` in its own replay or its miss bracket,
  :func:`kgtuner.bench.compare.exhausted_cells`) is left out of that cell's comparisons: its figure there measures
  the table's size, not the search ("left out: pool exhausted"); where KGTuner's own replays ran out, the whole
  cell is left out. (Settled before any ``fair`` replay, from the pools' sizes alone: KGTuner+ASHA starts more
  stage-1 trials at budget 100 than the stage-1 pool holds, and leaving its cells out whole would have left out
  every comparison at that budget.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from kgtuner.bench.benchmark import STUDIES, ResultsJournal, algorithm_label, parse_algorithm, results_frame
from kgtuner.bench.card_cost import CONVERGED_SHARE, PUBLISHED_TOLERANCE, gap_words
from kgtuner.bench.compare import ALPHA, cell_verdicts, common_seeds, exhausted_cells, is_bracket, score_answers
from kgtuner.bench.pool import FULL_GRAPH_POOLS
from kgtuner.bench.table import answer_runs_text

from .common import DEMO_GRAPH, SEARCH_LABELS, scored_rows
from .stage2 import _fmt, _p, paired

#: The graphs the fair benchmark is recorded on (each is shown, with "not recorded yet" while it has no table).
GRAPHS = ("codex-m", "wn18rr")
STUDY = "fair"
REFERENCE = "kgtuner"
#: Folders under the page's data folder: the converged tables and their replays (the tables issue 38 found unfair
#: and their replays are under ``superseded/``).
TABLES, REPLAY = "tables", "replay"
#: An answer counts as measured over training noise when its configuration has at least this many recorded seeds.
ANSWER_SEEDS = 3
HEADING = "## The fair benchmark (issue 38)"
#: The comparison rule, fixed before the replays (the module docstring says it in full).
RULE = (f"per cell (graph, workers, budget), on the seeds every search of it has: each other search's test MRR "
        f"minus KGTuner's, and the exact two-sided Wilcoxon signed-rank p over the paired seeds; KGTuner is *behind* a "
        f"search when that difference is positive at p < {ALPHA:g} with its mean and signed ranks on the same side, "
        f"under every stage-2 mapping replayed for the cell (misses replaced by the nearest expansion, and lost), "
        f"*ahead* of it the other way; a search that ran out of its pool in a cell (repeats > 0, in its replay or its "
        f"miss bracket) is left out of that cell's comparisons, and the whole cell where KGTuner's own replays did")


def label(algorithm: str) -> str:
    """How the page names a search of the grid: ``rf_bore[space=decoupled]`` -> "RF+BORE (decoupled)"."""
    name, overrides, on_miss = parse_algorithm(algorithm)
    bits = [o.split("=", 1)[1] for o in overrides if o.startswith("search.space=")]
    bits += [f"misses {on_miss}"] if on_miss else []
    return SEARCH_LABELS.get(name, name) + (f" ({', '.join(bits)})" if bits else "")


def _graphs(tables: Path, replay: Path | None = None) -> list[str]:
    found = {p.parent.name for p in tables.glob("*/card.json")}
    found |= {p.parent.parent.name for p in replay.glob(f"*/{STUDY}/journal.jsonl")} if replay is not None else set()
    return [*GRAPHS, *sorted(found - set(GRAPHS) - {DEMO_GRAPH})]


def _pct(x) -> str:
    return "–" if x is None or not np.isfinite(float(x)) else f"{float(x):.0%}"


def card_line(graph: str, card: dict | None, rel: str) -> str:
    """One bullet on a converged table's recording, from its card.json (None: not recorded yet)."""
    if card is None:
        return f"- **{graph}**: not recorded yet (no `docs/{rel}/{TABLES}/{graph}/card.json`)."
    planned = {k: int(v) for k, v in (card.get("planned") or {}).items()}
    # per pool, the runs its plan asked for; the answers' seeds are in no pool's plan (a card from before they had none)
    counts = {k: int(v) for k, v in card["in_plan"].items()} if "in_plan" in card else \
        {k: int((v or {}).get("runs", 0)) for k, v in (card.get("counts") or {}).items()}
    answers = int(card.get("answer_runs", 0))
    runs = int(card.get("runs", sum(counts.values()))) - answers
    done = runs >= sum(planned.values()) > 0
    parts = [f"{runs} of {sum(planned.values())} planned runs recorded" + ("" if done else ", **partial**")
             + (" (per pool: " + ", ".join(f"`{p}` {counts.get(p, 0)}/{n}" for p, n in planned.items()) + ")"
                if planned else "")
             + answer_runs_text(answers)]
    protocol = card.get("protocol")
    if not protocol:
        parts.append("its card has no protocol figures (not a converged recording)")
    else:
        conv = protocol.get("convergence") or {}
        full = [conv[p] for p in FULL_GRAPH_POOLS if (conv.get(p) or {}).get("runs")]
        n = sum(int(c["runs"]) for c in full)
        ended = sum(int(c["converged"]) for c in full)
        if n:
            share = ended / n
            meets = "meets" if share >= CONVERGED_SHARE else "does not meet"
            parts.append(f"converged: {_pct(share)} of the {n} full-graph runs that did not fail ended by early "
                         f"stopping or their epoch limit, not by the cap ({meets} the rule of at least "
                         f"{CONVERGED_SHARE:.0%}" + ("" if done else " so far") + "; per pool: " + ", ".join(
                             f"`{p}` {_pct(conv[p].get('share'))}" for p in FULL_GRAPH_POOLS
                             if (conv.get(p) or {}).get("runs")) + ")")
        else:
            parts.append("converged: no full-graph run yet")
        best = protocol.get("best_vs_published") or {}
        if best.get("best_test_mrr") is None:
            parts.append("best full-graph test MRR: none yet")
        elif not best.get("published"):
            parts.append(f"best full-graph test MRR {best['best_test_mrr']:.4f} (no published value on file)")
        else:
            within = "within" if best.get("within") else "outside"
            parts.append(f"best full-graph test MRR {best['best_test_mrr']:.4f} against the published tuned ComplEx "
                         f"{best['published']:.3f} ({best.get('source') or '?'}): {gap_words(best['relative_gap'])} it "
                         f"({within} the {PUBLISHED_TOLERANCE:.0%} the rule allows)")
    return (f"- **{graph}** ([card]({rel}/{TABLES}/{graph}/card.md)): " + "; ".join(parts) + ".")


def load_journal(path: Path, table: Path | None = None) -> pd.DataFrame:
    """A ``fair`` replay journal's results frame (empty without a journal or a row), its answers scored from the
    recorded ``table`` folder as it is now where it holds one (``kgtuner.bench.answer_score``: the seeds recorded
    for the answers after the replay enter the scores, as in ``kgtuner bench replay``'s results.parquet)."""
    rows = scored_rows(ResultsJournal(path).read()[1] if path.is_file() else [], table)
    return results_frame(rows) if rows else pd.DataFrame()


def _seed_counts(answered: pd.DataFrame) -> pd.Series:
    """Per answered row, how many recorded seeds its answer's configuration has (``answer_seeds``: ``"0,1,2"``)."""
    return answered["answer_seeds"].map(lambda s: len([x for x in str(s).split(",") if x.strip()])
                                        if isinstance(s, str) else 0)


def _answer_share(cell: pd.DataFrame) -> float:
    """The share of the cell's answers whose configuration has at least :data:`ANSWER_SEEDS` recorded seeds."""
    if "answer_seeds" not in cell.columns:
        return np.nan
    answered = cell[cell["test_mrr"].notna()]
    if answered.empty:
        return np.nan
    return float((_seed_counts(answered) >= ANSWER_SEEDS).mean())


def answers_lacking_seeds(df: pd.DataFrame) -> tuple[int, int]:
    """(answer configurations with fewer than :data:`ANSWER_SEEDS` recorded seeds, answer configurations) of a
    replay's results; (0, n) for results without ``answer_seeds`` (an unpriced table's: the rule does not apply). A
    configuration is its answer run's id without the seed (``kgtuner.bench.pool.parse_run_id``)."""
    from kgtuner.bench.pool import parse_run_id

    if "answer_run" not in df.columns:
        return 0, 0
    answered = df[df["test_mrr"].notna() & df["answer_run"].notna()]
    configs = answered["answer_run"].map(lambda rid: parse_run_id(rid)[:4])
    if "answer_seeds" not in df.columns:
        return 0, int(configs.nunique())
    lacking = configs[(_seed_counts(answered) < ANSWER_SEEDS).to_numpy()]
    return int(lacking.nunique()), int(configs.nunique())


def rivals(df: pd.DataFrame) -> list[str]:
    """The searches KGTuner is compared with, in the grid's order (then any other the journal holds); the miss
    brackets are KGTuner's and KGTuner+ASHA's own replays, not rivals."""
    grid = [algorithm_label(a) for a in STUDIES[STUDY].algorithms]
    present = set(df["algorithm"])
    others = [a for a in grid if a in present and a != REFERENCE and not is_bracket(a)]
    return others + sorted(a for a in present - set(grid) if a != REFERENCE and not is_bracket(a))


def exhausted_in(df: pd.DataFrame) -> dict[tuple, set[str]]:
    """{(graph, workers, budget): the searches of the cell that ran out of their pool}, a miss bracket's exhaustion
    counted as its search's (``kgtuner_asha[on_miss=lose]`` -> ``kgtuner_asha``)."""
    out: dict[tuple, set[str]] = {}
    for r in exhausted_cells(df).to_dict("records"):
        name = r["algorithm"]
        if is_bracket(name):
            base, overrides, _ = parse_algorithm(name)
            name = algorithm_label(base + (f"[{','.join(overrides)}]" if overrides else ""))
        out.setdefault((r["graph"], int(r["workers"]), float(r["budget_trials"])), set()).add(name)
    return out


def _judged(cell: pd.DataFrame, out: set[str]) -> pd.DataFrame:
    """The cell's rows without the searches left out (``out``) and their miss brackets."""
    keep = [a for a in cell["algorithm"].unique()
            if not any(a == o or (is_bracket(a) and a == algorithm_label(o, "lose")) for o in out)]
    return cell[cell["algorithm"].isin(keep)]


def _judge(cell: pd.DataFrame, gone: set[str]) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(the cell's rows compared: without the searches left out, ``gone``, on their common seeds; their
    ``cell_verdicts``, None where KGTuner's own replays ran out of the pool)."""
    common = common_seeds(_judged(cell, gone))
    return common, None if REFERENCE in gone else cell_verdicts(common, reference=REFERENCE, alpha=ALPHA)


def fair_verdicts(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(verdicts, left out) of a ``fair`` replay by :data:`RULE`: ``kgtuner.bench.compare.cell_verdicts`` per cell on
    its common seeds (``better``: KGTuner ahead, ``worse``: behind), without the searches that ran out of their pool
    there, and the comparisons left out (graph, workers, budget_trials, algorithm): those searches, or every one of
    a cell where KGTuner's own replays ran out."""
    hit = exhausted_in(df)
    others = rivals(df)
    parts, left = [], []
    for key, cell in df.groupby(["graph", "workers", "budget_trials"], sort=True):
        out = hit.get((key[0], int(key[1]), float(key[2])), set())
        dropped = [a for a in others if a in set(cell["algorithm"])] if REFERENCE in out else sorted(out)
        left += [{"graph": key[0], "workers": int(key[1]), "budget_trials": float(key[2]), "algorithm": a}
                 for a in dropped]
        _, verdicts = _judge(cell, out)
        if verdicts is not None:
            parts.append(verdicts)
    parts = [v for v in parts if len(v)]
    verdicts = pd.concat(parts, ignore_index=True) if parts else cell_verdicts(df.iloc[:0])
    return verdicts, pd.DataFrame(left, columns=["graph", "workers", "budget_trials", "algorithm"])


def cell_table(df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(cells, the other searches in the grid's order). Per cell (graph, workers, budget): seeds compared,
    KGTuner's mean test MRR, per other search its difference and p (``diff:<alg>``, ``p:<alg>``), the searches it
    is behind / ahead of, the searches that ran out of their pool (``exhausted``; ``cell_out`` when KGTuner's own
    replays did), the max searcher share and the share of answers with >= 3 seeds. The rule: :data:`RULE`."""
    keys = ["graph", "workers", "budget_trials"]
    others = rivals(df)
    hit = exhausted_in(df)
    out = []
    for (graph, workers, budget), cell in df.groupby(keys, sort=True):
        gone = hit.get((graph, int(workers), float(budget)), set())
        common, v = _judge(cell, gone)
        ref = score_answers(common[common["algorithm"] == REFERENCE])
        row = {"graph": graph, "workers": int(workers), "budget": float(budget), "seeds": int(ref["seed"].nunique()),
               "kgtuner": float(ref["test_mrr"].mean()) if len(ref) else np.nan,
               "exhausted": sorted(gone), "cell_out": REFERENCE in gone, "behind": [], "ahead": [], "judged": 0,
               "searcher_share": float(cell["searcher_share"].max()) if "searcher_share" in cell else np.nan,
               "answer_seeds": _answer_share(cell)}
        compared = [a for a in others if a not in gone]
        if len(ref) and compared and v is not None:
            for r in paired(common, REFERENCE, compared).to_dict("records"):
                row[f"diff:{r['other']}"], row[f"p:{r['other']}"] = r["diff"], r["p"]
            row["behind"] = [a for a in compared if a in set(v.loc[v["verdict"] == "worse", "algorithm"])]
            row["ahead"] = [a for a in compared if a in set(v.loc[v["verdict"] == "better", "algorithm"])]
            row["judged"] = int(len(v))
        out.append(row)
    return pd.DataFrame(out), others


def verdict(row: dict) -> str:
    """The cell's verdict in words."""
    exhausted = ", ".join(label(a) for a in row["exhausted"])
    if row["cell_out"]:
        return f"left out: pool exhausted ({exhausted} repeated runs)"
    if not row["judged"]:
        return "–"
    words = []
    if row["behind"]:
        words.append("KGTuner behind " + ", ".join(label(a) for a in row["behind"]))
    if row["ahead"]:
        words.append(("ahead of " if words else "KGTuner ahead of ") + ", ".join(label(a) for a in row["ahead"]))
    text = "; ".join(words) if words else "no significant difference"
    return text + (f" ({exhausted} left out: pool exhausted)" if row["exhausted"] else "")


def cells_lines(graph: str, df: pd.DataFrame) -> list[str]:
    """A graph's ``fair`` replay, cell by cell (:func:`cell_table`), with where KGTuner is behind."""
    planned = len(STUDIES[STUDY].cells())
    cells, others = cell_table(df)
    if cells.empty:
        return []
    partial = len(df) < planned
    lacking, configs = answers_lacking_seeds(df)
    md = [f"**{graph}**: {len(df)} of the grid's {planned} searches replayed"
          + (" (**partial**: the figures are on the seeds every search of a cell has so far)" if partial else "")
          + (f" (**provisional**: {lacking} of the {configs} answer configurations have fewer than {ANSWER_SEEDS} "
             "recorded seeds yet; each answer scores the mean over the seeds recorded so far, so the figures move as "
             "the rest are recorded)" if lacking else "")
          + ". Per cell: KGTuner's mean test MRR, each other search's mean minus KGTuner's (exact Wilcoxon p), the "
            "verdict, the largest share of the budget a searcher spent computing ("
          + ("charged to the simulated clock: each searcher call delays the trials it starts by its CPU seconds"
             if bool(df.get("searcher_charged", pd.Series([False])).fillna(False).astype(bool).all())
             else "not charged to the simulated clock")
          + f"), and the share of answers with at least {ANSWER_SEEDS} recorded seeds.", ""]
    header = ["workers", "budget", "seeds", "KGTuner", *(label(a) for a in others), "verdict", "max searcher share",
              f"answers with >= {ANSWER_SEEDS} seeds"]
    md += ["| " + " | ".join(header) + " |", "|---:|---:|---:|---:|" + "---:|" * len(others) + "---|---:|---:|"]
    for row in cells.to_dict("records"):
        diffs = ["–" if row["cell_out"] or f"diff:{a}" not in row or not np.isfinite(row[f"diff:{a}"])
                 else f"{_fmt(row[f'diff:{a}'])} ({_p(row[f'p:{a}'])})" for a in others]
        share = row["searcher_share"]
        md.append("| " + " | ".join([str(row["workers"]), f"{row['budget']:g}", str(row["seeds"]),
                                     _fmt(row["kgtuner"], ".3f"), *diffs, verdict(row),
                                     "–" if not np.isfinite(share) else f"{share:.2%}",
                                     _pct(row["answer_seeds"])]) + " |")
    behind = [r for r in cells.to_dict("records") if r["behind"]]
    whole = [r for r in cells.to_dict("records") if r["cell_out"]]
    part = [r for r in cells.to_dict("records") if r["exhausted"] and not r["cell_out"]]
    left = ((f" Left out whole (KGTuner's own replays ran out of the pool): {len(whole)} of {len(cells)} cells." if whole
             else "") + (" Left out of their cell's comparisons (a search ran out of its pool): " + "; ".join(
                 f"{', '.join(label(a) for a in r['exhausted'])} at {r['workers']} worker(s), budget {r['budget']:g}"
                 for r in part) + "." if part else ""))
    tests = int(cells["judged"].sum())
    md += ["", (("KGTuner is significantly behind in " + "; ".join(
        f"{r['workers']} worker(s), budget {r['budget']:g} ({', '.join(label(a) for a in r['behind'])})"
        for r in behind) + ".") if behind else "In no judged cell is KGTuner significantly behind another search.")
        + left
        + (f" These are {tests} paired tests at p < {ALPHA:g}: about {ALPHA * tests:.1f} could pass by chance alone, "
           "so read one cell with care; a pattern across cells and graphs is the stronger evidence."
           if tests else "")]
    return md + [""]


def recording_state(tables: Path) -> list[dict]:
    """Per graph of the fair benchmark (:data:`GRAPHS` first): planned runs recorded (not the answers' seeds) and
    planned, from its card.json (0 of 0 while it has none)."""
    out = []
    for graph in _graphs(Path(tables)):
        path = Path(tables) / graph / "card.json"
        card = json.loads(path.read_text()) if path.is_file() else {}
        out.append({"graph": graph, "runs": int(card.get("runs", 0)) - int(card.get("answer_runs", 0)),
                    "planned": sum(int(v) for v in (card.get("planned") or {}).values())})
    return out


def load_replays(replay: Path, tables: Path | None = None) -> dict[str, pd.DataFrame]:
    """{graph: its ``fair`` replay's results frame} for every graph with a journal holding a row, scored from
    ``tables/<graph>`` where given (:func:`load_journal`)."""
    out = {}
    for journal in sorted(Path(replay).glob(f"*/{STUDY}/journal.jsonl")):
        graph = journal.parent.parent.name
        df = load_journal(journal, None if tables is None else Path(tables) / graph)
        if not df.empty:
            out[graph] = df
    return out


def complete(df: pd.DataFrame) -> bool:
    """Whether a ``fair`` replay holds every search of the grid and every answer configuration its
    :data:`ANSWER_SEEDS` recorded seeds (only then is a graph summarised: the scores move as seeds are recorded)."""
    return len(df) >= len(STUDIES[STUDY].cells()) and answers_lacking_seeds(df)[0] == 0


def section(root: Path, tables: Path | None = None, replay: Path | None = None) -> list[str]:
    """The page's lines on issue 38's fair benchmark (``root``: the page's data folder, ``docs/benchmarks``; the
    tables and replays under it unless given)."""
    root = Path(root)
    tables = root / TABLES if tables is None else Path(tables)
    replay = root / REPLAY if replay is None else Path(replay)
    rel = root.name
    md = [HEADING, "",
          "The recorded tables of the earlier replays were found unfair (issue 38; they are kept under "
          f"`docs/{rel}/superseded/`, at the end of this page); their successors are recorded "
          "under one protocol fixed before the first run: one rule for every full-graph run (the same epoch limit, "
          "validation, patience and cap in the `expand`, `full` and `decoupled` pools), a run's cost priced per shape "
          "rather than measured (so the budgets do not move with the machine's load), converged runs (at least "
          f"{CONVERGED_SHARE:.0%} of the full-graph runs must end by early stopping or their epoch limit, not by the "
          f"cap, and the best must come within {PUBLISHED_TOLERANCE:.0%} of a published tuned ComplEx), the one-stage "
          "searches also over KGTuner's own space on the `decoupled` pool (what the subgraph stage buys apart from "
          "what the narrower "
          f"space buys), and {ANSWER_SEEDS} recorded seeds for every configuration a replayed search answers with: a "
          "trial trains a seed drawn among those recorded for the table's plan, and an answer scores the mean test "
          "MRR over every recorded seed of its configuration (`kgtuner.bench.answer_score`). "
          f"The protocol and the commands: [the tables' README]({rel}/tables/README.md). The `fair` grid "
          "(`kgtuner.bench.benchmark.STUDIES`) replays every search on each table once it is complete "
          f"(`kgtuner bench replay --table docs/{rel}/{TABLES}/<graph> --study {STUDY} --out "
          f"docs/{rel}/{REPLAY}/<graph>/{STUDY}`).", "",
          "The recordings, from each table's `card.json`:", ""]
    graphs, replays = _graphs(tables, replay), load_replays(replay, tables)
    for graph in graphs:
        card_path = tables / graph / "card.json"
        md.append(card_line(graph, json.loads(card_path.read_text()) if card_path.is_file() else None, rel))
    journals = {g: replays[g] for g in graphs if g in replays}
    md.append("")
    if not journals:
        return md + [f"No `{STUDY}` replay yet: its cells appear here once a table is replayed.", ""]
    md += [f"The comparison rule, fixed in code before the replays (`scripts/benchmarks/page/fair.py`): {RULE}.", ""]
    for graph, df in journals.items():
        md += cells_lines(graph, df)
    return md
