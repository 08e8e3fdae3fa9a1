"""What a replayed search's answer scores (issue 38): on a priced table, its configuration's mean test MRR over every
recorded seed.

A replay's trials train seeds drawn among those recorded for the table's plan (``ReplayTable.draw``), so training
noise moves each search's path and answer. The answer is then scored not by the one seed its trial drew but by
the mean test MRR over all of its configuration's recorded seeds (:meth:`ReplayTable.seed_score`), those recorded
afterwards for the answers included (``kgtuner bench record --answers``): what a user retraining the answer would
get on average, rather than the luck of one seed that the search picked because its validation was high.

The seeds recorded for the answers are never drawn, so recording them leaves every search as it was: a results
row is scored again from the grown table (:func:`score_by_seeds`, which ``kgtuner bench replay`` applies to every row
it writes, replayed now or read from its journal), without replaying anything.

Scored rows keep the drawn run's figure as ``test_mrr_drawn`` and say how ``test_mrr`` was scored in
``answer_score``: ``seeds_mean``, or ``drawn`` where the answer's trial ended before its run's best validation
(its test MRR is then a validation proxy no other seed has a counterpart of) or the table does not hold the run.
``answer_seeds`` lists the configuration's recorded seeds (those the mean is over), whichever way it is scored. The anytime curve's points (``[second, valid, test, run]``)
are scored alike by their run. An unpriced (older) table's rows are returned as they are: their replays and
committed results stay what they were.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping

from kgtuner.bench.replay_table import is_missing

#: ``answer_score``: the answer's test MRR is its configuration's mean over every recorded seed.
SEEDS_MEAN = "seeds_mean"
#: ``answer_score``: the answer's test MRR is its drawn trial's (a validation proxy, or a run the table lacks).
DRAWN = "drawn"


def score_by_seeds(rows: Iterable[Mapping], table) -> list[dict]:
    """``rows`` (results rows of replays on ``table``) with each answer scored by its configuration's seeds (see the
    module docstring); unchanged copies on an unpriced table. Scoring a row again gives the same row."""
    rows = [dict(r) for r in rows]
    if not getattr(table, "priced", False):
        return rows
    return [_score_row(r, table) if r.get("graph") in (None, table.graph) else r for r in rows]


def _score_row(row: dict, table) -> dict:
    drawn = row.get("test_mrr_drawn", row.get("test_mrr"))
    drawn = None if is_missing(drawn) else float(drawn)
    # a row without a full-graph answer keeps none; every other is its drawn figure unless its seeds score it
    out = {**row, "test_mrr_drawn": drawn, "test_mrr": drawn, "answer_score": DRAWN}
    run = None if is_missing(row.get("answer_run")) else str(row["answer_run"])
    mean, seeds = table.seed_score(run) if run is not None else (None, [])
    if seeds:  # the answer configuration's recorded seeds, as the table holds them now, however it is scored
        out["answer_seeds"] = ",".join(str(s) for s in seeds)
    proxy = row.get("answer_test_is_valid_proxy")
    if drawn is not None and mean is not None and (is_missing(proxy) or not bool(proxy)):
        out.update(test_mrr=mean, answer_score=SEEDS_MEAN)
    if row.get("anytime_json"):
        out["anytime_json"] = json.dumps([_score_point(p, table) for p in json.loads(row["anytime_json"])])
    return out


def _score_point(point: list, table) -> list:
    """An anytime point ``[second, valid, test, run]`` with ``test`` the mean over ``run``'s seeds (a point without
    a scoring run, or of an older replay without the fourth element, stays as it is)."""
    if len(point) < 4 or point[3] is None or point[2] is None:
        return list(point)
    mean = table.seed_score(point[3])[0]
    return [point[0], point[1], point[2] if mean is None else mean, point[3]]
