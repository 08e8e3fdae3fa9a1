"""Command line of ``kgtuner.analysis``: importance, srcc and stages tables of finished runs.

    python -m kgtuner.analysis importance RUN_DIR_OR_PARQUET [--space decoupled] [--stage 1]
    python -m kgtuner.analysis srcc A B [--keys lr loss ...] [--ignore batch_size dim] [--top-k 10]
    python -m kgtuner.analysis stages RUN_DIR [--top-k 10]

Bad input (missing file or column, nothing to match, bad option) prints one line ``kgtuner: error: ...``
and exits 2 (:mod:`kgtuner.cli`, the style of every kgtuner command).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import pandas as pd

from kgtuner.analysis.srcc import AGGREGATES, DEFAULT_IGNORE, SRCCResult
from kgtuner.cli import ArgumentParser, fail
from kgtuner.errors import KGTunerError


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.4f}"
    return str(x)


def format_table(frame: pd.DataFrame) -> str:
    """Right-aligned plain-text table of a DataFrame."""
    head = [str(c) for c in frame.columns]
    body = [[_fmt(v) for v in row] for row in frame.itertuples(index=False)]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [head, *body])


def _srcc_lines(res: SRCCResult) -> list[str]:
    lines = [(f"SRCC {_fmt(res.srcc)} over {res.n} matched configurations "
             f"({res.only_a} only in the first, {res.only_b} only in the second)")]
    if res.top_k is not None:
        lines.append(f"top-{res.top_k}: SRCC among the reference's top {_fmt(res.top_k_srcc)}, overlap "
                     f"{_fmt(res.top_k_overlap)}, best reference score within the first's top-{res.top_k} / best "
                     f"{_fmt(res.top_k_best_ratio)}")
    return lines


def _parser(prog: str = "python -m kgtuner.analysis") -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("importance", help="random-forest hyper-parameter importances of a run")
    imp.add_argument("trials", help="trials.parquet or the run directory holding it")
    imp.add_argument("--space", default=None, help="space name/path used to encode (default: inferred)")
    imp.add_argument("--stage", type=int, default=None, help="only trials of this stage")
    imp.add_argument("--metric", default="valid_mrr")
    imp.add_argument("--trees", type=int, default=200)
    imp.add_argument("--repeats", type=int, default=10, help="permutation repeats")
    imp.add_argument("--seed", type=int, default=0)
    for name, helptext in (("srcc", "SRCC between the rankings of the same configurations in two runs"),
                           ("stages", "SRCC of stage-1 vs stage-2 scores inside one KGTuner run")):
        s = sub.add_parser(name, help=helptext)
        if name == "srcc":
            s.add_argument("a", help="first trials.parquet / run directory (e.g. the subgraph run)")
            s.add_argument("b", help="reference trials.parquet / run directory (e.g. the full-graph run)")
        else:
            s.add_argument("run", help="a kgtuner run directory or its trials.parquet")
        s.add_argument("--keys", nargs="+", default=None, help="match configurations on these keys only")
        s.add_argument("--ignore", nargs="*", default=list(DEFAULT_IGNORE),
                       help="keys left out of the match (default: batch_size dim)")
        s.add_argument("--metric", default="valid_mrr")
        s.add_argument("--agg", choices=AGGREGATES, default="mean" if name == "srcc" else "max",
                       help="how repeated configurations (or stage-2 expansions) are combined")
        s.add_argument("--top-k", type=int, default=None)
    return p


def main(argv: Sequence[str] | None = None, prog: str = "python -m kgtuner.analysis") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        if args.command == "importance":
            from kgtuner.analysis.importance import hp_importance

            table = hp_importance(args.trials, args.space, metric=args.metric, stage=args.stage,
                                  n_estimators=args.trees, n_repeats=args.repeats, seed=args.seed)
            print(f"{table.attrs['source']}: {table.attrs['n_trials']} ok trials, forest in-sample "
                  f"R^2 {table.attrs['r2']:.3f} on {args.metric}")
            print(format_table(table))
        elif args.command == "srcc":
            from kgtuner.analysis.srcc import srcc_consistency

            res = srcc_consistency(args.a, args.b, metric=args.metric, keys=args.keys, ignore=args.ignore,
                                   agg=args.agg, top_k=args.top_k)
            print("\n".join(_srcc_lines(res)))
            print(format_table(res.matched.reset_index(names="config").sort_values("b", ascending=False)
                               [["a", "b", "config"]]))
        else:
            from kgtuner.analysis.srcc import stage_consistency

            res, per = stage_consistency(args.run, metric=args.metric, keys=args.keys, ignore=args.ignore,
                                         agg=args.agg, top_k=args.top_k)
            print(f"stage 1 vs stage 2 ({args.agg} over expansions):")
            print("\n".join(_srcc_lines(res)))
            if len(per):
                print("per stage-2 expansion:")
                print(format_table(per))
    except KGTunerError as exc:
        return fail(exc)
    return 0
