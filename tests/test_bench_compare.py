"""The replay benchmark's statistics (kgtuner.bench.compare) on hand-made results: the test, the verdicts' rule,
partial grids and the anytime curves."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.stats import rankdata

from kgtuner.bench.compare import (NO_ANSWER_MRR, cell_verdicts, mean_anytime, signed_rank_test, summarize,
                                   variant_verdicts, wilcoxon_p)


def _row(algorithm, seed, mrr, *, workers=8, budget=10.0, graph="codex-m", anytime=None):
    return {"graph": graph, "algorithm": algorithm, "workers": workers, "budget_trials": budget, "budget_s": 100.0,
            "seed": seed, "valid_mrr": mrr, "test_mrr": mrr, "trials": 10, "misses": 0, "repeats": 0,
            "mean_distance": 0.0, "searcher_s": 0.1,
            "anytime_json": json.dumps(anytime if anytime is not None else [[50.0, mrr, mrr]])}


def _enumerated_p(d: np.ndarray) -> float:
    """The two-sided p of the signed-rank statistic over every sign flip of the non-zero differences' ranks."""
    d = d[d != 0]
    r = rankdata(np.abs(d))
    mid, observed = r.sum() / 2, r[d > 0].sum()
    sums = np.array([r[np.array(m, dtype=bool)].sum() for m in itertools.product((0, 1), repeat=len(d))])
    return float(np.mean(np.abs(sums - mid) >= abs(observed - mid) - 1e-9))


def test_the_signed_rank_test_is_exact_with_zero_and_tied_differences():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 9, 16, 30):  # without ties or zeros: scipy's exact test
        for _ in range(5):
            d = rng.normal(0.2, 1.0, n)
            assert wilcoxon_p(d) == pytest.approx(stats.wilcoxon(d, method="exact").pvalue, abs=1e-12)
    # equal answers give zero differences: they are dropped and the rest tested exactly (scipy 1.17's default falls
    # back to the normal approximation there, p 0.043 for 5 positive differences among 25 zeros; exactly 2 / 2^5)
    d = np.r_[np.zeros(25), rng.random(5)]
    assert signed_rank_test(d) == (pytest.approx(0.0625), 1) and wilcoxon_p(d) == pytest.approx(_enumerated_p(d))
    for d in (np.array([1, 1, 2, -2, 3, 3, 3, -1, 0.5, -0.5, 2, 1, 0, 0]), np.array([-1, -1, -1, 2, 0, -3, -3])):
        assert wilcoxon_p(d) == pytest.approx(_enumerated_p(d), abs=1e-12)
    assert signed_rank_test(np.array([-1, -1, -1, 2, 0, -3, -3]))[1] == -1
    assert signed_rank_test(np.zeros(4)) == (1.0, 0) and signed_rank_test(np.array([np.nan, 0.0])) == (1.0, 0)


def test_a_verdict_needs_the_mean_and_the_signed_ranks_on_one_side():
    """TPE ahead of KGTuner by 0.002 on 29 seeds, and without an answer (scored 0) on one: the mean says KGTuner is
    better, the ranks say TPE is. Neither is a verdict."""
    rows = [_row("kgtuner", s, 0.30) for s in range(30)]
    rows += [_row("tpe", s, 0.302 if s else None) for s in range(30)]
    rows += [_row("random", s, 0.25 + 0.001 * (s % 3)) for s in range(30)]  # behind on every seed
    v = cell_verdicts(pd.DataFrame(rows)).set_index("algorithm")
    assert v.loc["tpe", "diff"] > 0 and v.loc["tpe", "p"] < 0.05  # what this test is about
    assert v.loc["tpe", "verdict"] == "undecided"
    assert v.loc["random", "verdict"] == "better"
    rows[30] = _row("tpe", 0, 0.302)  # with its answer, TPE is ahead on every seed
    assert cell_verdicts(pd.DataFrame(rows)).set_index("algorithm").loc["tpe", "verdict"] == "worse"


def test_the_defaults_test_counts_each_seed_once_over_the_budgets():
    """A seed's searches at the three budgets share their seed: five seeds ahead at every budget are five pairs
    (exact p = 2 / 2^5 = 0.0625), not fifteen (p = 2 / 2^15)."""
    def grid(seeds):
        return pd.DataFrame([_row(a, s, 0.3 + (0.01 if a != "kgtuner" else 0.0) + 0.001 * s, budget=b)
                             for a in ("kgtuner", "kgtuner[top_k=5]") for b in (10.0, 30.0, 100.0)
                             for s in range(seeds)])

    five = variant_verdicts(grid(5)).iloc[0]
    assert (five["seeds"], five["pairs"]) == (5, 15) and five["p"] == pytest.approx(0.0625)
    assert five["verdict"] == "no difference"
    assert variant_verdicts(grid(6)).iloc[0]["verdict"] == "wins"  # 2 / 2^6 = 0.031


def test_a_partly_replayed_cell_is_compared_on_the_seeds_all_its_algorithms_have():
    rows = [_row("kgtuner", s, 0.30 if s < 10 else 0.40) for s in range(30)]
    rows += [_row("random", s, 0.31) for s in range(10)]  # ahead on each of its 10 seeds
    rows += [_row("kgtuner[on_miss=lose]", s, 0.2) for s in range(5)]  # a bracket in part: kept where it has seeds
    s = summarize(pd.DataFrame(rows)).set_index("algorithm")
    assert s.loc["kgtuner", "seeds"] == s.loc["random", "seeds"] == 10 and s.loc["kgtuner[on_miss=lose]", "seeds"] == 5
    assert s.loc["random", "test_mrr"] > s.loc["kgtuner", "test_mrr"]
    assert s.loc["random", "mean_rank"] == 1.0 and s.loc["kgtuner", "mean_rank"] == 2.0


def test_the_anytime_curve_scores_a_search_without_an_answer_yet_as_zero():
    xs = np.array([0.0, 0.25, 0.6, 1.0])
    searches = pd.DataFrame([_row("kgtuner", 0, 0.4, anytime=[[10.0, None, None], [50.0, 0.4, 0.4]]),
                             _row("kgtuner", 1, None, anytime=[[10.0, None, None]])])  # never an answer
    assert mean_anytime(searches, xs) == pytest.approx([NO_ANSWER_MRR, NO_ANSWER_MRR, 0.2, 0.2])
    # an answer from a trial the budget's end cut reports at the end, written to the millisecond: it counts
    at_end = _row("kgtuner", 2, 0.3, anytime=[[100.0005, 0.3, 0.3]])  # a budget of 100 s, read just past it
    assert mean_anytime(pd.DataFrame([*searches.to_dict("records"), at_end]), xs)[-1] == pytest.approx(0.7 / 3)


def test_first_answer_share_reads_the_anytime_curve():
    """The first full-graph answer is the first anytime point with a test MRR; a search without one is inf and
    counted; shares are of the budget, a point past it (a trial cut at the end) counts at the end."""
    import json
    import math

    import pandas as pd

    from kgtuner.bench.compare import first_answer_share, first_answer_table

    curve = json.dumps([[10.0, None, None], [30.0, 0.2, 0.19], [50.0, 0.3, 0.28]])
    assert first_answer_share(curve, 100.0) == 0.3
    assert first_answer_share(json.dumps([[120.0, 0.2, 0.2]]), 100.0) == 1.0
    assert first_answer_share(json.dumps([[10.0, None, None]]), 100.0) == math.inf
    df = pd.DataFrame({"graph": "g", "workers": 8, "budget_trials": 10.0, "algorithm": "kgtuner", "seed": [0, 1, 2],
                       "budget_s": 100.0, "anytime_json": [curve, json.dumps([[60.0, 0.1, 0.1]]), "[]"]})
    t = first_answer_table(df)
    assert t.to_dict("records") == [{"graph": "g", "workers": 8, "budget_trials": 10.0, "algorithm": "kgtuner",
                                     "seeds": 3, "median": pytest.approx(0.45), "p90": pytest.approx(0.57), "none": 1}]
