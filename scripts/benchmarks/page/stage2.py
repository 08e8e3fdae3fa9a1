"""Issue 37's stage-2 study on the recorded tables: the fixed rule's verdicts, KGTuner against the one-stage searches,
and when its first full-graph answer arrives.

Reads the journals of ``kgtuner bench replay --study stage2`` and ``--study rf_bore_now``
(``docs/benchmarks/superseded/issue37/replay/<graph>/<study>/``), and, for random search, TPE and KGTuner before
issue 37, the ``main`` grid's journals (``docs/benchmarks/superseded/replay/<graph>/main/``: code those searches share with today's, except
KGTuner's). Prints the study's tables (``python scripts/benchmarks/page/stage2.py``); ``section()`` is the part of
``docs/benchmarks.md`` that ``scripts/benchmarks/benchmarks_page.py`` writes from them.

The rule, fixed in code before the runs (:data:`kgtuner.bench.benchmark.STUDIES`, ``stage2``): each variant against
``kgtuner`` (today's default), per seed averaged over workers and budgets, two-sided exact Wilcoxon p < 0.05 with
no budget worse (:func:`kgtuner.bench.compare.variant_verdicts`); a variant replaces the default only where it wins
on codex-m and on WN18RR (:func:`kgtuner.bench.compare.decide_defaults`). Against the one-stage searches a cell is
*worse* when KGTuner's paired difference is negative at that level (:func:`kgtuner.bench.compare.cell_verdicts`).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from kgtuner.bench.benchmark import ResultsJournal, results_frame
from kgtuner.bench.compare import (cell_verdicts, decide_defaults, first_answer_table, mean_ci,
                                   score_answers, variant_verdicts, wilcoxon_p)

REFERENCE = "kgtuner"
BEFORE = "kgtuner (before issue 37)"
ONE_STAGE = ("random", "tpe", "rf_bore")
SEEDS = 30


def _journal_rows(path: Path) -> pd.DataFrame:
    rows = ResultsJournal(path).read()[1] if path.is_file() else []
    return results_frame(rows) if rows else pd.DataFrame()


def load(replay: Path, main_replay: Path) -> dict[str, pd.DataFrame]:
    """``{"study": the stage2 arms, "rivals": random/tpe (main) + rf_bore (rf_bore_now) + KGTuner now,
    "before": KGTuner of the main grid}``, every graph."""
    study, rivals, before = [], [], []
    for journal in sorted(replay.glob("*/stage2/journal.jsonl")):
        study.append(_journal_rows(journal))
    for journal in sorted(replay.glob("*/rf_bore_now/journal.jsonl")):
        rivals.append(_journal_rows(journal))
    for journal in sorted(main_replay.glob("*/main/journal.jsonl")):
        df = _journal_rows(journal)
        if not df.empty:
            rivals.append(df[df["algorithm"].isin(["random", "tpe"])])
            before.append(df[df["algorithm"] == REFERENCE].assign(algorithm=BEFORE))
    cat = lambda frames: pd.concat([f for f in frames if not f.empty], ignore_index=True) if any(  # noqa: E731
        not f.empty for f in frames) else pd.DataFrame()
    out = {"study": cat(study), "rivals": cat(rivals), "before": cat(before)}
    if not out["study"].empty:
        now = out["study"][out["study"]["algorithm"] == REFERENCE]
        out["rivals"] = cat([out["rivals"], now])
    return out


def paired(df: pd.DataFrame, reference: str, others: list[str]) -> pd.DataFrame:
    """Per (graph, workers, budget, other): seeds, the reference's mean test MRR, the other's minus the reference's
    (mean, 95% CI) and the exact Wilcoxon p, on the seeds both have."""
    out = []
    for (graph, workers, budget), cell in score_answers(df).groupby(["graph", "workers", "budget_trials"]):
        wide = cell.pivot_table(index="seed", columns="algorithm", values="test_mrr", aggfunc="first")
        if reference not in wide.columns:
            continue
        for other in [o for o in others if o in wide.columns]:
            both = wide[[reference, other]].dropna()
            d = (both[other] - both[reference]).to_numpy(dtype=float)
            mean, lo, hi = mean_ci(d)
            out.append({"graph": graph, "workers": int(workers), "budget": float(budget), "other": other,
                        "seeds": len(d), "ref_mrr": float(both[reference].mean()) if len(d) else math.nan,
                        "other_mrr": float(both[other].mean()) if len(d) else math.nan,
                        "diff": mean, "lo": lo, "hi": hi, "p": wilcoxon_p(d)})
    return pd.DataFrame(out, columns=["graph", "workers", "budget", "other", "seeds", "ref_mrr", "other_mrr", "diff",
                                      "lo", "hi", "p"])


def complete_seeds(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of the seeds (per graph) that hold every cell of every arm: the unit of the overall rule."""
    cells = df.groupby(["workers", "budget_trials"]).ngroups if not df.empty else 0
    arms = df["algorithm"].nunique() if not df.empty else 0
    return df.groupby(["graph", "seed"]).filter(lambda g: len(g) == cells * arms) if not df.empty else df


def _fmt(v: float, fmt: str = "+.3f") -> str:
    return "–" if v is None or not np.isfinite(v) else format(v, fmt)


def _p(p: float) -> str:
    return "–" if not np.isfinite(p) else (f"{p:.2g}" if p < 0.001 else f"{p:.3f}")


def section(replay: Path, main_replay: Path) -> list[str]:
    """The page's lines on issue 37's stage 2 (none while no journal exists)."""
    data = load(replay, main_replay)
    study = data["study"]
    if study.empty:
        return []
    cmd = ("`kgtuner bench replay --table docs/benchmarks/superseded/tables/<graph> --study stage2 --out "
           "docs/benchmarks/superseded/issue37/replay/<graph>/stage2 --no-reuse` (and `--study rf_bore_now`; run when "
           "these folders were `docs/benchmarks/tables/` and `docs/benchmarks/issue37/replay/`); the tables: "
           "`python scripts/benchmarks/page/stage2.py`")
    md = ["## KGTuner's stage 2 after issue 37 (replayed on the superseded tables)", "",
          "Issue 37 changed three things in KGTuner, all on by default: stage 2's first round trains every top-10 "
          "stage-1 configuration once, in the warm forest's order, before any configuration's second size "
          "(`stage2_searcher.cover`; before, 8 slots at the switch took the four sizes of two configurations); "
          "RF+BORE's forest acts from the third trial, as the reference code's (was: after 10 random trials); and "
          "stage-1 trials cut at the switch are lower bounds, not finished results. The study replays, on the same "
          "tables and seeds as the main grid, today's KGTuner against the plain argmax in stage 2 on today's stage 1 "
          "(`cover=false`), against `stage2_start=ordered`, and against a first round at each configuration's "
          "cheapest expansion (`cover_sizes=cheapest`, the stage 2 meant to fit a small budget). " + cmd + ".", ""]
    seeds = study.groupby(["graph", "algorithm"])["seed"].nunique().unstack()
    partial = bool((seeds < SEEDS).any().any())
    md += ["Seeds replayed per graph and arm" + (" (**partial**: verdicts need all 30; the figures below are on the "
                                                  "seeds every arm has)" if partial else "") + ":", "",
           "| graph | " + " | ".join(f"`{a}`" for a in seeds.columns) + " |",
           "|---|" + "---:|" * len(seeds.columns)]
    md += [f"| {g} | " + " | ".join(str(int(v)) if np.isfinite(v) else "0" for v in row) + " |"
           for g, row in seeds.iterrows()]
    complete = complete_seeds(study)
    verdicts = variant_verdicts(complete, reference=REFERENCE) if not complete.empty else pd.DataFrame()
    md += ["", "The rule (fixed before the runs): a variant wins on a graph when its paired test-MRR difference to "
               "`kgtuner`, per seed averaged over the 2 worker counts and 3 budgets, is positive at two-sided exact "
               "Wilcoxon p < 0.05 and no budget shows it worse; it replaces the default only if it wins on codex-m "
               "and WN18RR.", "",
           "| graph | variant | seeds | variant minus kgtuner [95% CI] | p | worst budget (diff, p) | verdict |",
           "|---|---|---:|---|---:|---|---|"]
    for r in verdicts.to_dict("records") if not verdicts.empty else []:
        md.append(f"| {r['graph']} | `{r['variant']}` | {r['seeds']} | {_fmt(r['diff'])} [{_fmt(r['diff_lo'])}, "
                  f"{_fmt(r['diff_hi'])}] | {_p(r['p'])} | {r['worst_budget']:g} ({_fmt(r['worst_budget_diff'])}, "
                  f"{_p(r['worst_budget_p'])}) | {r['verdict']} |")
    if not verdicts.empty and not partial:
        changes = [r["variant"] for r in decide_defaults(verdicts) if r["change"]]
        md += ["", "Decision: " + (f"{', '.join(f'`{c}`' for c in changes)} becomes the default." if changes else
                                   "no variant wins on both graphs; the defaults stay as they are.")]
    md += section_cells(data)
    return md + [""]


def section_cells(data: dict[str, pd.DataFrame]) -> list[str]:
    """Per graph and cell: KGTuner now, its difference to before and to each arm, the one-stage verdicts and when
    the first full-graph answer arrives."""
    study, rivals, before = data["study"], data["rivals"], data["before"]
    arms = sorted(a for a in study["algorithm"].unique() if a != REFERENCE)
    with_before = pd.concat([study, before], ignore_index=True) if not before.empty else study
    diffs = paired(with_before, REFERENCE, [BEFORE, *arms])
    have = [a for a in ONE_STAGE if a in set(rivals.get("algorithm", pd.Series(dtype=str)))]
    judged = rivals[rivals["algorithm"].isin([REFERENCE, *have])] if have else pd.DataFrame()
    one = paired(judged, REFERENCE, have) if have else pd.DataFrame()
    verdicts = cell_verdicts(judged, reference=REFERENCE) if have else pd.DataFrame()
    first = first_answer_table(pd.concat([study[study["algorithm"] == REFERENCE], judged], ignore_index=True)
                               if have else study[study["algorithm"] == REFERENCE])
    md = ["", "Per cell: KGTuner now (mean test MRR over the seeds), each other arm minus it (exact Wilcoxon p), the "
              "best one-stage search's mean and KGTuner's verdict against random search, TPE and RF+BORE (*worse* "
              "names a search significantly ahead of it), and the share of the budget at which the first full-graph "
              "answer arrived (median over the seeds; KGTuner / the one-stage searches' earliest).", ""]
    header = ["graph", "workers", "budget", "KGTuner now", "before issue 37", *[f"`{a[len('kgtuner'):]}`" for a in arms],
              "best one-stage", "vs one-stage", "first answer"]
    md += ["| " + " | ".join(header) + " |", "|---|---:|---:|" + "---:|" * (len(header) - 3)]
    worse_cells = []
    for (graph, workers, budget), cell in diffs.groupby(["graph", "workers", "budget"], sort=True):
        by = {r["other"]: r for r in cell.to_dict("records")}
        now = next(iter(by.values()))["ref_mrr"]
        row = [graph, str(workers), f"{budget:g}", f"{now:.3f}"]
        for other in [BEFORE, *arms]:
            r = by.get(other)
            row.append("–" if r is None else f"{_fmt(r['diff'])} ({_p(r['p'])})")
        o = one[(one["graph"] == graph) & (one["workers"] == workers) & (one["budget"] == budget)] if len(one) else one
        if len(o):
            best = o.sort_values("other_mrr", ascending=False).iloc[0]
            row.append(f"{best['other']} {best['other_mrr']:.3f}")
        else:
            row.append("–")
        v = verdicts[(verdicts["graph"] == graph) & (verdicts["workers"] == workers)
                     & (verdicts["budget_trials"] == budget)] if len(verdicts) else verdicts
        worse = sorted(v[v["verdict"] == "worse"]["algorithm"]) if len(v) else []
        better = sorted(v[v["verdict"] == "better"]["algorithm"]) if len(v) else []
        row.append(("worse than " + ", ".join(worse)) if worse else ("better than " + ", ".join(better)) if better
                   else ("undecided" if len(v) else "–"))
        if worse:
            worse_cells.append((graph, workers, budget, worse))
        f = first[(first["graph"] == graph) & (first["workers"] == workers) & (first["budget_trials"] == budget)]
        mine = f[f["algorithm"] == REFERENCE]["median"]
        theirs = f[f["algorithm"].isin(have)]["median"]
        row.append(f"{_fmt(float(mine.iloc[0]), '.2f') if len(mine) else '–'} / "
                   f"{_fmt(float(theirs.min()), '.2f') if len(theirs) else '–'}")
        md.append("| " + " | ".join(row) + " |")
    if worse_cells:
        md += ["", "Cells where KGTuner is still significantly behind a one-stage search: " + "; ".join(
            f"{g}, {w} worker(s), budget {b:g} ({', '.join(x)})" for g, w, b, x in worse_cells) + ". There its "
            "stage 2 gets half of a budget worth about 10 full-graph trials of compute, and an expanded run costs "
            "more than a full-space one on these tables (the first-answer column): the subgraph stage does not pay "
            "for itself at that scale."]
    elif len(verdicts):
        md += ["", "In no cell is KGTuner significantly behind a one-stage search."]
    return md


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replay", type=Path, default=Path("docs/benchmarks/superseded/issue37/replay"))
    ap.add_argument("--main-replay", type=Path, default=Path("docs/benchmarks/superseded/replay"))
    args = ap.parse_args(argv)
    data = load(args.replay, args.main_replay)
    if data["study"].empty:
        raise SystemExit(f"no stage2 journal under {args.replay}")
    pd.set_option("display.width", 200)
    study = data["study"]
    print("seeds replayed per graph and arm:\n" + study.groupby(["graph", "algorithm"]).seed.nunique().unstack()
          .to_string() + "\n")
    complete = complete_seeds(study)
    if not complete.empty:
        print("verdicts (variant minus kgtuner; seeds with every cell of every arm):")
        print(variant_verdicts(complete, reference=REFERENCE).round(4).to_string(index=False) + "\n")
    with_before = pd.concat([study, data["before"]], ignore_index=True)
    arms = sorted(a for a in study["algorithm"].unique() if a != REFERENCE)
    print("per cell, each arm minus kgtuner (95% CI, exact Wilcoxon p):")
    print(paired(with_before, REFERENCE, [BEFORE, *arms]).round(4).to_string(index=False) + "\n")
    rivals = data["rivals"]
    if not rivals.empty:
        print("KGTuner now against the one-stage searches (cell verdicts):")
        print(cell_verdicts(rivals[rivals["algorithm"].isin([REFERENCE, *ONE_STAGE])], reference=REFERENCE)
              .round(4).to_string(index=False) + "\n")
    print("share of the budget at which the first full-graph answer arrived (median, 90th percentile; none = never):")
    print(first_answer_table(pd.concat([study, rivals[rivals["algorithm"] != REFERENCE]], ignore_index=True)
                             if not rivals.empty else study).round(3).to_string(index=False))
    print("\n".join(["", "--- page section ---", *section(args.replay, args.main_replay)]))


if __name__ == "__main__":
    main()
