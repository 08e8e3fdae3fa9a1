"""What a replay benchmark says: per graph, workers and budget, each algorithm against KGTuner on paired seeds.

From ``results.parquet`` (:func:`kgtuner.bench.benchmark.results_frame`), per (graph, workers, budget):

- the final validation and test MRR of each search's answer, mean and 95% t-interval;
- the paired difference to the reference algorithm (KGTuner), this search minus KGTuner, with its 95% t-interval
  and the exact two-sided Wilcoxon signed-rank p-value over the seeds (:func:`signed_rank_test`);
- the mean rank (1 = best test MRR of the seed; ties share the mean rank);
- the time to reach random search's final test MRR (same seed), median over seeds, as a share of the budget
  (``never`` counted as infinity: the median is then ``never`` when half or more never reach it);
- the regret: the table's best full-graph test MRR minus the answer's;
- the searcher's own computing time as a share of the budget (``searcher_share``), charged to the simulated clock
  in the grids that set ``charge_searcher`` (the ``fair`` grid) and not in the others;
- whether the cell is *exhausted* (:func:`mark_exhausted`; :func:`exhausted_cells` lists them): a search of it ran
  out of its pool (``repeats``), so its figures measure the table's size, not the search; a page leaves such a cell
  out of its comparisons and says so.

And the paper's Figure 6 claim on the pool: the Spearman rank correlation between a configuration's subgraph
validation MRR and its full-graph validation MRR (each expanded size separately).
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import numpy as np

REFERENCE = "kgtuner"


def mean_ci(values: np.ndarray) -> tuple[float, float, float]:
    """(mean, low, high): the mean of the finite values and its 95% t-interval (NaN bounds for one value)."""
    from scipy import stats

    v = values[np.isfinite(values)]
    if len(v) == 0:
        return math.nan, math.nan, math.nan
    if len(v) == 1:
        return float(v[0]), math.nan, math.nan
    half = float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return float(v.mean()), float(v.mean() - half), float(v.mean() + half)


def signed_rank_test(d: np.ndarray) -> tuple[float, int]:
    """(p, direction) of the Wilcoxon signed-rank test of paired differences ``d``: the two-sided p-value, exact
    for any sample (zero differences dropped, tied magnitudes given their average rank, and the null distribution
    of the positive rank sum computed over the sign flips of those very ranks, so zeros and ties do not fall back
    to the normal approximation), and the side the ranks point to (+1 when the positive ranks outweigh the
    negative ones, -1 the other way, 0 when they balance). 1.0 and 0 when every difference is zero."""
    from scipy.stats import rankdata

    d = np.asarray(d, dtype=float)
    d = d[np.isfinite(d) & (d != 0)]
    if len(d) == 0:
        return 1.0, 0
    twice = np.rint(2 * rankdata(np.abs(d))).astype(np.int64)  # average ranks are multiples of 1/2
    dist = np.zeros(int(twice.sum()) + 1)
    dist[0] = 1.0
    for r in twice:  # each rank (r >= 2) is counted positive or negative with probability 1/2 under the null
        dist[r:] = 0.5 * (dist[r:] + dist[:-r])  # the right side is evaluated on the old values first
        dist[:r] *= 0.5
    plus, total = int(twice[d > 0].sum()), int(twice.sum())
    lower, upper = dist[:plus + 1].sum(), dist[plus:].sum()
    direction = int(np.sign(2 * plus - total))
    return float(min(1.0, 2 * min(lower, upper))), direction


def wilcoxon_p(d: np.ndarray) -> float:
    """The exact two-sided Wilcoxon signed-rank p-value of paired differences ``d`` (:func:`signed_rank_test`)."""
    return signed_rank_test(d)[0]


def decided_sign(d: np.ndarray, alpha: float) -> int:
    """+1 or -1 when the paired differences ``d`` differ from zero at two-sided p < ``alpha`` with their mean and
    their signed ranks on the same side; 0 otherwise (not significant, or one large difference, such as a search
    without an answer, pulling the mean against the ranks of the other pairs)."""
    d = np.asarray(d, dtype=float)
    d = d[np.isfinite(d)]
    if len(d) == 0:
        return 0
    p, direction = signed_rank_test(d)
    mean_sign = int(np.sign(d.mean()))
    return mean_sign if p < alpha and mean_sign == direction else 0


def _reach_time(anytime: list, target: float) -> float:
    for t, _, test, *_ in anytime:  # an anytime point: (second, valid, test[, scoring run])
        if test is not None and test >= target - 1e-12:
            return float(t)
    return math.inf


#: The MRR a search scores when it ended without a full-graph answer (every trial of its answer's stage failed,
#: was lost to a missing expansion, or was cut before its first validation): it gave the user no measured
#: configuration. Every comparison (means, paired differences, ranks, verdicts) uses it, for every search alike;
#: the results keep such an answer's MRRs empty, and the summaries count these searches (``no_answer``).
NO_ANSWER_MRR = 0.0


def score_answers(df):
    """``df`` with a search's missing answer MRRs (``valid_mrr``, ``test_mrr``) scored :data:`NO_ANSWER_MRR`, and
    ``no_answer``: whether it had none."""
    out = df.copy()
    out["no_answer"] = out["test_mrr"].isna()
    cols = [c for c in ("valid_mrr", "test_mrr") if c in out.columns]
    out[cols] = out[cols].astype(float).fillna(NO_ANSWER_MRR)
    return out


def is_bracket(algorithm: str) -> bool:
    """A replay of a search under another miss mapping (``kgtuner[on_miss=lose]``): reported, not ranked."""
    return "on_miss=" in str(algorithm)


def common_seeds(cell):
    """The rows of one (graph, workers, budget) cell at the seeds every ranked algorithm of the cell has (all of
    them once the grid is complete): a partly replayed grid is compared on whole pairs, never on different
    seeds per algorithm. A mapping bracket's rows are kept at those seeds as far as it has them."""
    ranked = cell[~cell["algorithm"].map(is_bracket)]
    seeds = None
    for _, g in ranked.groupby("algorithm"):
        seeds = set(g["seed"]) if seeds is None else seeds & set(g["seed"])
    return cell if seeds is None else cell[cell["seed"].isin(seeds)]


#: A cell of the results: one algorithm's searches at one graph, worker count and budget (its seeds).
CELL_KEYS = ["graph", "algorithm", "workers", "budget_trials"]


def mark_exhausted(df):
    """``df`` (results rows) with ``exhausted``: whether the row's cell (:data:`CELL_KEYS`) has a search with
    ``repeats > 0`` -- a suggestion mapped to a recorded run that search already had, its pool (at those sizes)
    used up: the table is too small for that budget, so the cell says more of the table than of the search."""
    out = df.copy()
    if not len(out) or "repeats" not in out.columns:
        out["exhausted"] = False
        return out
    repeated = out["repeats"].astype(float).fillna(0.0) > 0
    out["exhausted"] = repeated.groupby([out[k] for k in CELL_KEYS]).transform("any").astype(bool)
    return out


def exhausted_cells(df):
    """The exhausted cells of ``df`` (:func:`mark_exhausted`), one row each: :data:`CELL_KEYS`, ``searches``,
    ``exhausted_searches`` (those with repeats) and ``max_repeats``; empty when none is."""
    import pandas as pd

    cols = [*CELL_KEYS, "searches", "exhausted_searches", "max_repeats"]
    marked = mark_exhausted(df)
    if not len(marked) or not marked["exhausted"].any():
        return pd.DataFrame(columns=cols)
    marked = marked[marked["exhausted"]].assign(repeated=lambda f: f["repeats"].astype(float).fillna(0.0) > 0)
    out = marked.groupby(CELL_KEYS, sort=True).agg(searches=("seed", "size"), exhausted_searches=("repeated", "sum"),
                                                   max_repeats=("repeats", "max")).reset_index()
    return out[cols]


def summarize(df, *, table_best: float | None = None, reference: str = REFERENCE):
    """One row per (graph, workers, budget_trials, algorithm) with the figures of the module docstring, over the
    seeds every ranked algorithm of the cell has (:func:`common_seeds`)."""
    import pandas as pd
    from scipy.stats import rankdata

    out = []
    df = mark_exhausted(score_answers(df))
    for (graph, workers, budget), cell in df.groupby(["graph", "workers", "budget_trials"], sort=True):
        cell = common_seeds(cell)
        wide_test = cell.pivot_table(index="seed", columns="algorithm", values="test_mrr", aggfunc="first")
        ranked = [a for a in wide_test.columns if not is_bracket(a)]  # a mapping bracket is not a competitor
        ranks = pd.DataFrame(index=wide_test.index, columns=wide_test.columns, dtype=float)
        for seed, row in wide_test[ranked].iterrows():
            vals = row.to_numpy(dtype=float)
            filled = np.where(np.isfinite(vals), vals, -np.inf)
            ranks.loc[seed, ranked] = rankdata(-filled, method="average")
        rnd = cell[cell.algorithm == "random"].set_index("seed")  # its own final MRR; a seed without one: no target
        random_final = rnd["test_mrr"].mask(rnd["no_answer"])
        for algorithm, g in cell.groupby("algorithm", sort=False):
            g = g.set_index("seed")
            valid, valid_lo, valid_hi = mean_ci(g["valid_mrr"].to_numpy(dtype=float))
            test, test_lo, test_hi = mean_ci(g["test_mrr"].to_numpy(dtype=float))
            row: dict[str, Any] = {"graph": graph, "workers": int(workers), "budget_trials": float(budget),
                                   "algorithm": algorithm, "seeds": int(g["test_mrr"].notna().sum()),
                                   "no_answer": int(g["no_answer"].sum()),
                                   "test_is_valid": int(g["answer_test_is_valid_proxy"].fillna(False).astype(bool).sum())
                                   if "answer_test_is_valid_proxy" in g else 0,
                                   "valid_mrr": valid, "valid_lo": valid_lo, "valid_hi": valid_hi,
                                   "test_mrr": test, "test_lo": test_lo, "test_hi": test_hi,
                                   "mean_rank": float(ranks[algorithm].mean()),
                                   "trials": float(g["trials"].mean()), "misses": float(g["misses"].mean()),
                                   "repeats": float(g["repeats"].mean()) if "repeats" in g else 0.0,
                                   "distance": float(g["mean_distance"].mean()) if "mean_distance" in g else math.nan,
                                   "searcher_s": float(g["searcher_s"].mean()),
                                   "searcher_share": float((g["searcher_s"] / g["budget_s"]).mean()),
                                   "exhausted": bool(g["exhausted"].any())}
            if reference in wide_test.columns and algorithm != reference:
                d = (wide_test[algorithm] - wide_test[reference]).to_numpy(dtype=float)
                mean, lo, hi = mean_ci(d)
                row.update(diff=mean, diff_lo=lo, diff_hi=hi, p=wilcoxon_p(d))
            else:
                row.update(diff=math.nan, diff_lo=math.nan, diff_hi=math.nan, p=math.nan)
            if len(random_final):
                times = []
                for seed, r in g.iterrows():
                    target = random_final.get(seed)
                    if target is None or not np.isfinite(target):
                        continue
                    times.append(_reach_time(json.loads(r["anytime_json"]), float(target)) / float(r["budget_s"]))
                row["reach_random_share"] = float(np.median(times)) if times else math.nan
            else:
                row["reach_random_share"] = math.nan
            row["regret"] = (table_best - test) if table_best is not None and np.isfinite(test) else math.nan
            out.append(row)
    return pd.DataFrame(out)


def format_summary(summary, reference: str = REFERENCE) -> str:
    """The summary as text tables, one per (graph, workers, budget)."""
    lines = []
    width = max([13, *(len(str(a)) for a in summary["algorithm"])])
    for (graph, workers, budget), cell in summary.groupby(["graph", "workers", "budget_trials"], sort=True):
        lines.append(f"\n{graph}, {workers} worker(s), budget {budget:g} mean full-graph trials "
                     f"({int(cell['seeds'].max())} paired seeds)")
        lines.append(f"  {'algorithm':<{width}} {'valid MRR':>9} {'test MRR [95% CI]':>26} {'vs ' + reference + ' [95% CI]':>30}"
                     f" {'p':>7} {'rank':>5} {'reach rnd':>9} {'regret':>7} {'trials':>6} {'miss':>5} {'rep':>5}"
                     f" {'dist':>5} {'srch%':>6} {'none':>4} {'v-as-t':>6}")
        for r in cell.sort_values("mean_rank", na_position="last").itertuples(index=False):
            diff = "" if not np.isfinite(r.diff) else f"{r.diff:+.4f} [{r.diff_lo:+.4f}, {r.diff_hi:+.4f}]"
            p = "" if not np.isfinite(r.p) else f"{r.p:.3g}"
            reach = ("never" if np.isinf(r.reach_random_share) else
                     "" if not np.isfinite(r.reach_random_share) else f"{r.reach_random_share:.2f}")
            regret = "" if not np.isfinite(r.regret) else f"{r.regret:.4f}"
            rank = f"{r.mean_rank:5.2f}" if np.isfinite(r.mean_rank) else f"{'-':>5}"
            lines.append(f"  {r.algorithm:<{width}} {r.valid_mrr:9.4f} {r.test_mrr:8.4f} [{r.test_lo:.4f}, {r.test_hi:.4f}]"
                         f" {diff:>30} {p:>7} {rank} {reach:>9} {regret:>7} {r.trials:6.1f} {r.misses:5.2f}"
                         f" {r.repeats:5.1f} {r.distance:5.2f} {100 * r.searcher_share:6.2f} {r.no_answer:4d} {r.test_is_valid:6d}")
    lines.append("\n  test MRR: of each search's answer; vs kgtuner: paired difference over the seeds (this search minus "
                 "kgtuner), exact Wilcoxon signed-rank p (two-sided); rank: mean rank by test MRR (1 = best); reach rnd: median share of the budget until the "
                 "answer's test MRR reached random search's final one (same seed); regret: the table's best full-graph "
                 "test MRR minus the answer's; miss: stage-2 candidates without a recorded expansion; rep: suggestions "
                 "mapped to a run the search already had (its pool exhausted); dist: mean distance from a suggestion to the "
                 "recorded configuration it was mapped to (standardised features of its pool; 0 = recorded exactly), "
                 "the check that the mapping moves no searcher further than another; srch%: the searcher's own "
                 "computing time (suggestions and results, wall seconds of the replay process) as a share of the "
                 "budget's simulated seconds; the clock is charged its CPU seconds only where the replay charged the "
                 "searcher (--charge-searcher; the fair grid); none: searches that ended without "
                 f"a full-graph answer, scored {NO_ANSWER_MRR:g} in every figure; v-as-t: answers whose test MRR is "
                 "their validation MRR (the answer's trial ended before its run's best validation, and the table holds "
                 "test metrics at the best validation only).")
    return "\n".join(lines)


def subgraph_srcc(table, resamples: int = 2000, seed: int = 0) -> list[dict]:
    """Per expanded size: the Spearman correlation between the subgraph validation MRR of a stage-1 pool
    configuration and the full-graph validation MRR of its expansion (the paper's Figure 6 claim), with a 95%
    percentile-bootstrap interval over the configurations (``resamples`` paired resamples, ``seed``: fixed).
    The expansions are the top of the stage-1 ranking only, so this is the correlation within the best
    configurations, where a narrower range of MRRs makes it lower than across the whole space."""
    from scipy.stats import spearmanr

    sub = {k: r.best_until(len(r.valid) - 1) for k, r in table.runs["stage1"].items()}
    by_size: dict[tuple, list] = {}
    for (i, b, d), run in table.runs["expand"].items():
        full = run.best_until(len(run.valid) - 1)
        if sub.get(i) is not None and full is not None:
            by_size.setdefault((b, d), []).append((sub[i], full))
    out = []
    for (b, d), pairs in sorted(by_size.items()):
        x, y = np.array(pairs).T
        rho = float(spearmanr(x, y).statistic) if len(pairs) > 2 else math.nan
        lo = hi = math.nan
        if len(pairs) > 3 and resamples:
            idx = np.random.default_rng(seed).integers(0, len(x), size=(int(resamples), len(x)))
            boot = _rowwise_spearman(x[idx], y[idx])
            boot = boot[np.isfinite(boot)]  # a resample with one distinct value has no rank correlation
            if len(boot):
                lo, hi = (float(v) for v in np.percentile(boot, [2.5, 97.5]))
        out.append({"batch_size": b, "dim": d, "configs": len(pairs), "srcc": rho, "ci_low": lo, "ci_high": hi})
    return out


def _rowwise_spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row pair of ``x`` and ``y`` (``[n, m]``): Pearson's r of the average ranks, as
    ``scipy.stats.spearmanr`` computes it; NaN for a row without spread."""
    from scipy.stats import rankdata

    rx, ry = rankdata(x, axis=1), rankdata(y, axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rx * ry).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)


def table_best_test(table) -> float | None:
    """The best test MRR of any full-graph run of the table (``expand`` and ``full`` pools)."""
    vals = [r.test.get("mrr") for pool in ("expand", "full") for r in table.runs[pool].values()]
    vals = [v for v in vals if v is not None and np.isfinite(v)]
    return max(vals) if vals else None


#: The anytime curves' times are written to the millisecond (rounded to the nearest): a point at the budget's end
#: may read up to half of that past it (a stage-2 trial cut by the budget reports at its end).
ANYTIME_ROUNDING_S = 1e-3


def mean_anytime(searches, xs: np.ndarray) -> np.ndarray:
    """The mean over ``searches`` (rows of one algorithm and cell, with ``anytime_json`` and ``budget_s``) of the
    test MRR of each search's current answer at the budget shares ``xs``; a search without an answer yet (or ever)
    scores :data:`NO_ANSWER_MRR` there, as in every other figure, so the curve also shows how soon searches have one."""
    curves = []
    for r in searches.itertuples(index=False):
        pts = json.loads(r.anytime_json)
        budget = float(r.budget_s)
        t = np.array([p[0] for p in pts], dtype=float)
        t = np.where(t <= budget + ANYTIME_ROUNDING_S, np.minimum(t, budget), t) / budget  # the end, as written
        v = np.array([np.nan if p[2] is None else p[2] for p in pts], dtype=float)
        idx = np.searchsorted(t, xs, side="right") - 1
        held = v[np.clip(idx, 0, None)] if len(v) else np.full(len(xs), np.nan)
        curves.append(np.where(idx >= 0, held, np.nan))  # before its first point: no answer yet
    if not curves:
        return np.full(len(xs), np.nan)
    return np.nan_to_num(np.array(curves), nan=NO_ANSWER_MRR).mean(axis=0)


def plot_anytime(df, path, grid: int = 60) -> None:
    """PNG: per (workers, budget) panel, each algorithm's mean test MRR of the current answer against the share
    of the budget used (:func:`mean_anytime`, over the seeds every algorithm of the cell has)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workers, budgets = sorted({int(w) for w in df["workers"]}), sorted({float(b) for b in df["budget_trials"]})
    fig, axes = plt.subplots(len(workers), len(budgets), figsize=(4.2 * len(budgets), 3.2 * len(workers)),
                             squeeze=False)  # a row per worker count, a column per budget
    xs = np.linspace(0, 1, grid)
    algorithms = sorted(df["algorithm"].unique())  # one colour per algorithm in every panel (a bracket has fewer)
    colours = dict(zip(algorithms, itertools.cycle(plt.rcParams["axes.prop_cycle"].by_key()["color"])))
    for (i, w), (j, b) in itertools.product(enumerate(workers), enumerate(budgets)):
        ax, cell = axes[i][j], common_seeds(df[(df.workers == w) & (df.budget_trials == b)])
        if cell.empty:
            ax.axis("off")
            continue
        for algorithm, g in cell.groupby("algorithm"):
            ax.plot(xs, mean_anytime(g, xs), color=colours[algorithm], label=algorithm)
        ax.set_title(f"{w} worker(s), {b:g} trials' budget", fontsize=9)
        ax.set_xlabel("share of the budget")
        ax.set_ylabel("test MRR of the answer")
    handles = [plt.Line2D([], [], color=colours[a], label=a) for a in algorithms]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(algorithms), 4), fontsize=8)
    fig.tight_layout(rect=(0, 0.1 if len(workers) == 1 else 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: Part 4's rule, fixed before the runs: a variant of KGTuner ``wins`` on a graph when its paired test-MRR
#: difference to the default, per seed averaged over the budgets of the ``defaults`` grid, is positive with a
#: two-sided Wilcoxon p below ``ALPHA`` (the mean and the signed ranks on the same side, :func:`decided_sign`), and
#: no single budget shows it worse at that level. A default changes only when the variant wins on the deciding
#: graph *and* on the confirming one, unchanged.
ALPHA = 0.05
DECIDE_ON, CONFIRM_ON = "codex-m", "wn18rr"


def variant_verdicts(df, reference: str = REFERENCE, alpha: float = ALPHA):
    """Per (graph, variant): seeds, (budget, seed) pairs, the mean paired test-MRR difference to ``reference``
    with its 95% CI and Wilcoxon p over the seeds (each seed's differences averaged over the budgets), the worst
    budget's difference and p, and the verdict (``wins``, ``loses``: worse overall at ``alpha``, or
    ``no difference``)."""
    import pandas as pd

    out = []
    df = score_answers(df)
    for graph, g in df.groupby("graph"):
        wide = g.pivot_table(index=["workers", "budget_trials", "seed"], columns="algorithm", values="test_mrr",
                             aggfunc="first")
        if reference not in wide.columns:
            continue
        for variant in [c for c in wide.columns if c != reference]:
            d = (wide[variant] - wide[reference]).dropna()
            # one seed's searches at the budgets share their seed (and so their first suggestions): the unit of the
            # overall test is the seed, its differences averaged over the budgets
            per_seed = d.groupby(level="seed").mean().to_numpy(dtype=float)
            mean, lo, hi = mean_ci(per_seed)
            p, sign = wilcoxon_p(per_seed), decided_sign(per_seed, alpha)
            per_budget = []
            for budget, db in d.groupby(level="budget_trials"):
                v = db.to_numpy(dtype=float)
                per_budget.append((float(v.mean()), wilcoxon_p(v), float(budget), decided_sign(v, alpha)))
            worst = min(per_budget) if per_budget else (math.nan, math.nan, math.nan, 0)
            budget_loss = any(s < 0 for *_, s in per_budget)
            verdict = "wins" if sign > 0 and not budget_loss else "loses" if sign < 0 else "no difference"
            out.append({"graph": graph, "variant": variant, "seeds": int(len(per_seed)), "pairs": int(len(d)),
                        "diff": mean, "diff_lo": lo, "diff_hi": hi, "p": p, "worst_budget": worst[2],
                        "worst_budget_diff": worst[0], "worst_budget_p": worst[1], "verdict": verdict})
    return pd.DataFrame(out, columns=["graph", "variant", "seeds", "pairs", "diff", "diff_lo", "diff_hi", "p",
                                      "worst_budget", "worst_budget_diff", "worst_budget_p", "verdict"])


def decide_defaults(verdicts, decide_on: str = DECIDE_ON, confirm_on: str = CONFIRM_ON) -> list[dict]:
    """Part 4's decisions from :func:`variant_verdicts`: per variant, whether it wins on ``decide_on``, whether
    ``confirm_on`` confirms it, and ``change`` (both). Of two variants of one setting that both qualify, the one
    with the larger gain on ``decide_on`` is kept."""
    from kgtuner.bench.benchmark import parse_algorithm

    by = {(r["graph"], r["variant"]): r for r in verdicts.to_dict("records")}
    rows = []
    for variant in sorted({v for _, v in by}):
        first, second = by.get((decide_on, variant)), by.get((confirm_on, variant))
        rows.append({"variant": variant, "decide": first["verdict"] if first else "not run",
                     "decide_diff": first["diff"] if first else math.nan,
                     "confirm": second["verdict"] if second else "not run",
                     "change": bool(first and second and first["verdict"] == second["verdict"] == "wins")})
    best: dict[str, dict] = {}
    for r in rows:
        if r["change"]:
            key = ",".join(o.split("=", 1)[0] for o in parse_algorithm(r["variant"])[1])  # the setting(s) it changes
            if key not in best or r["decide_diff"] > best[key]["decide_diff"]:
                best[key] = r
    for r in rows:
        r["change"] = any(r is b for b in best.values())
    return rows


def cell_verdicts(df, reference: str = REFERENCE, alpha: float = ALPHA):
    """Per (graph, workers, budget, other search): whether ``reference``'s answer is ``better``, ``worse`` or
    ``undecided`` against it, on the paired test MRRs (two-sided Wilcoxon p < ``alpha``, with the mean difference
    and the signed ranks on the same side: :func:`decided_sign`).

    Where ``df`` also holds the reference's replay with its stage-2 misses lost (``kgtuner[on_miss=lose]``, the
    ``miss_bracket`` grid), a verdict needs both mappings to agree: ``better`` only when KGTuner is better with its
    misses replaced by the nearest recorded expansion (which leans in its favour) *and* with them lost (which
    leans against it); likewise ``worse``. Under that mapping a two-stage rival is compared through its own
    lost-miss replay (``kgtuner_asha[on_miss=lose]``), and the mapping counts only where the lost-miss replays
    cover every seed of the cell (a partly replayed bracket decides nothing yet). Columns: graph, workers, budget_trials, algorithm, mappings (1 or 2),
    diff (reference minus the other, nearest mapping), p, diff_lost, p_lost (NaN without the bracket), verdict."""
    import pandas as pd

    from kgtuner.bench.benchmark import algorithm_label

    lost = algorithm_label(reference, "lose")
    out = []
    df = score_answers(df)
    for (graph, workers, budget), cell in df.groupby(["graph", "workers", "budget_trials"], sort=True):
        wide = cell.pivot_table(index="seed", columns="algorithm", values="test_mrr", aggfunc="first")
        if reference not in wide.columns:
            continue
        seeds = wide[reference].notna()
        for other in [c for c in wide.columns if c not in (reference, lost) and not is_bracket(c)]:
            # with misses lost, a two-stage rival is paired with its own lost-miss replay; a mapping counts only
            # where its replays cover every seed of the cell (a partly replayed bracket decides nothing yet)
            pairs = [(reference, other)]
            rival = algorithm_label(other, "lose")  # a one-stage search's label stays as it is
            if lost in wide.columns and rival in wide.columns and not (seeds & (wide[lost].isna()
                                                                               | wide[rival].isna())).any():
                pairs.append((lost, rival))
            figures, signs = [], []
            for ref, against in pairs:
                d = (wide[ref] - wide[against]).to_numpy(dtype=float)
                d = d[np.isfinite(d)]
                mean, p = (float(np.mean(d)) if len(d) else math.nan), wilcoxon_p(d)
                figures += [mean, p]
                signs.append(decided_sign(d, alpha))
            verdict = ("better" if all(s > 0 for s in signs) else "worse" if all(s < 0 for s in signs)
                       else "undecided")
            figures += [math.nan, math.nan] * (2 - len(pairs))
            out.append({"graph": graph, "workers": int(workers), "budget_trials": float(budget), "algorithm": other,
                        "mappings": len(pairs), "diff": figures[0], "p": figures[1], "diff_lost": figures[2],
                        "p_lost": figures[3], "verdict": verdict})
    return pd.DataFrame(out, columns=["graph", "workers", "budget_trials", "algorithm", "mappings", "diff", "p",
                                      "diff_lost", "p_lost", "verdict"])


def first_answer_share(anytime_json: str, budget_s: float) -> float:
    """The share of the budget at which a search's first full-graph answer arrived (the end of its first trial of
    the answer's stage with a result, from its anytime curve); ``inf`` when it never had one."""
    import json

    for t, _, test, *_ in json.loads(anytime_json or "[]"):
        if test is not None:
            return min(float(t), float(budget_s)) / float(budget_s)
    return math.inf


def first_answer_table(df):
    """Per (graph, workers, budget_trials, algorithm): the median and the 90th percentile, over the seeds, of the
    share of the budget at which the first full-graph answer arrived, and the searches that had none."""
    import pandas as pd

    rows = df.assign(first_answer=[first_answer_share(a, b) for a, b in zip(df["anytime_json"], df["budget_s"])])
    out = []
    for key, g in rows.groupby(["graph", "workers", "budget_trials", "algorithm"], sort=True):
        shares = g["first_answer"].to_numpy(dtype=float)
        finite = shares[np.isfinite(shares)]
        out.append({**dict(zip(("graph", "workers", "budget_trials", "algorithm"), key)), "seeds": int(len(shares)),
                    "median": float(np.median(finite)) if len(finite) else math.inf,
                    "p90": float(np.quantile(finite, 0.9)) if len(finite) else math.inf,
                    "none": int((~np.isfinite(shares)).sum())})
    return pd.DataFrame(out, columns=["graph", "workers", "budget_trials", "algorithm", "seeds", "median", "p90",
                                      "none"])
