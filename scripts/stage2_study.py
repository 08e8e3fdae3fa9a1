"""Issue 37's stage-2 study on the recorded tables: verdicts of the fixed rule and when the first answer arrives.

Reads the journals of ``kgtuner bench replay --study stage2`` (docs/benchmarks/issue37/replay/<graph>/stage2/) and
prints, per graph, :func:`kgtuner.bench.compare.variant_verdicts` (each variant against ``kgtuner``, the rule fixed
before the runs: per seed averaged over workers and budgets, two-sided exact Wilcoxon p < 0.05 and no budget worse),
the per-cell paired differences, and the share of the budget at which each arm's first full-graph answer arrived.
A partial journal is summarised on the seeds every arm has. Usage:

    python scripts/stage2_study.py [--replay docs/benchmarks/issue37/replay]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from kgtuner.bench.benchmark import ResultsJournal, results_frame
from kgtuner.bench.compare import (common_seeds, first_answer_table, mean_ci, score_answers, variant_verdicts,
                                   wilcoxon_p)

REFERENCE = "kgtuner"


def load(replay: Path) -> pd.DataFrame:
    frames = []
    for journal in sorted(replay.glob("*/stage2/journal.jsonl")):
        rows = ResultsJournal(journal).read()[1]
        if rows:
            frames.append(results_frame(rows))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def cells(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell and variant: seeds, the paired test-MRR difference to the reference with its 95% CI, and p."""
    out = []
    for (graph, workers, budget), cell in score_answers(df).groupby(["graph", "workers", "budget_trials"]):
        wide = common_seeds(cell).pivot_table(index="seed", columns="algorithm", values="test_mrr", aggfunc="first")
        for variant in [c for c in wide.columns if c != REFERENCE]:
            d = (wide[variant] - wide[REFERENCE]).dropna().to_numpy(dtype=float)
            mean, lo, hi = mean_ci(d)
            out.append({"graph": graph, "workers": workers, "budget": budget, "variant": variant, "seeds": len(d),
                        "ref_mrr": float(wide[REFERENCE].mean()), "diff": mean, "lo": lo, "hi": hi,
                        "p": wilcoxon_p(d)})
    return pd.DataFrame(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replay", type=Path, default=Path("docs/benchmarks/issue37/replay"))
    args = ap.parse_args(argv)
    df = load(args.replay)
    if df.empty:
        raise SystemExit(f"no stage2 journal under {args.replay}")
    pd.set_option("display.width", 200)
    seeds = df.groupby(["graph", "algorithm"]).seed.nunique().unstack()
    print("seeds replayed per graph and arm (a verdict needs all 30):\n" + seeds.to_string() + "\n")
    complete = df.groupby(["graph", "seed"]).filter(lambda g: len(g) == g["algorithm"].nunique() * 6 and
                                                    g["algorithm"].nunique() == df["algorithm"].nunique())
    print(f"verdicts (variant minus {REFERENCE}; seeds with every cell of every arm):")
    print(variant_verdicts(complete, reference=REFERENCE).round(4).to_string(index=False) + "\n")
    print("per cell (variant minus kgtuner, 95% CI, exact Wilcoxon p):")
    print(cells(df).round(4).to_string(index=False) + "\n")
    print("share of the budget at which the first full-graph answer arrived (median, 90th percentile; none = never):")
    print(first_answer_table(df).round(3).to_string(index=False))


if __name__ == "__main__":
    main()
