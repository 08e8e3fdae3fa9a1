"""RF+BORE as KGTuner's stage-2 searcher: the first wave at the switch (``cover``), the forest's ties and labels
once full-graph results come in, priors labelled per group, and what it does once its candidates run out."""

from __future__ import annotations

import numpy as np
import pytest
from ray.tune.search import Searcher

from kgtuner.errors import ConfigError
from kgtuner.search import RFBORESearcher, load_space

FAST = dict(n_trees=16, trees_per_fit=8, n_candidates=256)  # same algorithm, smaller forest/pool


def _key(cfg):
    return tuple(sorted((k, round(v, 6) if isinstance(v, float) else v) for k, v in cfg.items()))


def _region_case(seed: int):
    """Stage-1 rows that clearly favour loss=CE (subgraph MRR ~0.4 against ~0.1, a few failures), and 10
    top configurations, the 5 without CE listed first, expanded to 40 stage-2 candidates."""
    dec = load_space("decoupled", model="complex")
    rng = np.random.default_rng(100 + seed)
    prior = []
    for i in range(80):
        cfg = dec.sample(rng)
        if i % 13 == 0:
            prior.append((cfg, None, None))  # failed
        else:
            prior.append((cfg, (0.4 if cfg["loss"] == "CE" else 0.1) + 0.02 * rng.random(), None))
    pool = [dec.sample(rng) for _ in range(400)]
    good = [c for c in pool if c["loss"] == "CE"][:5]
    bad = [c for c in pool if c["loss"] != "CE"][:5]
    cands = [c for cfg in bad + good for c in dec.expand_stage2(cfg)]
    return dec, prior, cands


def _production_stage2(candidates, dec, slots: int, seed: int, **override):
    """KGTuner's stage-2 searcher exactly as ``conf/search/kgtuner.yaml`` builds it (``batch: none``, 200 trees)."""
    import yaml

    from kgtuner.paths import CONF_DIR
    from kgtuner.search import make_stage2_searcher

    cfg = yaml.safe_load((CONF_DIR / "search" / "kgtuner.yaml").read_text())
    assert cfg["stage2_searcher"]["batch"] == "none" and cfg["stage2_searcher"]["cover"] is True
    cfg["stage2_searcher"].update(override)
    return make_stage2_searcher(cfg, candidates, space=dec, max_concurrent=slots, seed=seed)


def _top10_case(seed: int):
    """The region case's stage-1 rows, and 10 top configurations as the switch ranks them (the 5 without CE
    ranked first), expanded in ``stage2_candidates``' order (every configuration once, then second sizes)."""
    from kgtuner.search import stage2_candidates

    dec, prior, _ = _region_case(seed)
    rng = np.random.default_rng(200 + seed)
    pool = [dec.sample(rng) for _ in range(400)]
    top = [c for c in pool if c["loss"] != "CE"][:5] + [c for c in pool if c["loss"] == "CE"][:5]
    return dec, prior, top, stage2_candidates(dec, top)


def _configuration(cfg: dict, top: list[dict]) -> int:
    """The stage-1 rank of the configuration a stage-2 candidate expands."""
    strip = {k: v for k, v in cfg.items() if k not in ("batch_size", "dim")}
    return next(i for i, t in enumerate(top) if {k: v for k, v in t.items() if k not in ("batch_size", "dim")} == strip)


def _first_wave(seed: int, slots: int = 8, **override) -> tuple[list[int], list[dict]]:
    dec, prior, top, cands = _top10_case(seed)
    s = _production_stage2(cands, dec, slots, seed, **override)
    assert s.add_prior_observations(prior, "stage1") == len(prior) and len(cands) == 40
    picks = [s.suggest(f"t{i}") for i in range(slots)]
    return [_configuration(p, top) for p in picks], picks


def test_the_first_stage2_wave_trains_distinct_configurations_in_the_warm_forests_order():
    """At the switch 8 slots fill before any stage-2 result. The forest, fitted on stage-1 rows that all share one
    batch size and dimension, scores a configuration's 4 expansions alike: its plain argmax filled the slots with
    the 4 sizes of one configuration, then of another (issue 37). With ``cover`` (production), the 8 suggestions are
    8 distinct stage-1 configurations, the forest choosing which: the 5 it favours (loss=CE) come first, although
    they rank last in stage 1. The remaining 2 configurations come next, before any configuration's second size."""
    for seed in range(3):
        ranks, picks = _first_wave(seed)
        assert len(set(ranks)) == 8, (seed, ranks)
        assert sorted(ranks[:5]) == [5, 6, 7, 8, 9], (seed, ranks)  # the CE configurations, the forest's choice
        assert all(p["batch_size"] in (512, 1024) and p["dim"] in (1000, 2000) for p in picks)
    dec, prior, top, cands = _top10_case(0)
    s = _production_stage2(cands, dec, 8, 0)
    s.add_prior_observations(prior, "stage1")
    first = [s.suggest(f"t{i}") for i in range(8)]
    for i in range(2):
        s.on_trial_complete(f"t{i}", {"valid_mrr": 0.3})
    later = [s.suggest(f"u{i}") for i in range(2)]
    assert sorted(_configuration(p, top) for p in first + later) == list(range(10))


def test_without_cover_the_first_wave_collapses_onto_two_configurations():
    """The defect ``cover`` fixes, on the same case: ``cover: false`` (the forest's plain argmax) gives the 8 slots
    to the 4 sizes of two configurations."""
    for seed in range(3):
        ranks, _ = _first_wave(seed, cover=False)
        assert len(set(ranks)) == 2 and all(ranks.count(r) == 4 for r in set(ranks)), (seed, ranks)


def test_cheapest_cover_sizes_train_each_configuration_first_at_its_cheapest_expansion():
    """``cover_sizes: cheapest``: the first round trains every configuration at its smallest batch_size x dim (here
    512 x 1000), in the forest's order; later rounds take the other sizes."""
    dec, prior, top, cands = _top10_case(0)
    s = _production_stage2(cands, dec, 10, 0, cover_sizes="cheapest")
    s.add_prior_observations(prior, "stage1")
    first = [s.suggest(f"t{i}") for i in range(10)]
    assert sorted(_configuration(p, top) for p in first) == list(range(10))
    assert {(p["batch_size"], p["dim"]) for p in first} == {(512, 1000)}
    assert sorted(_configuration(p, top) for p in first[:5]) == [5, 6, 7, 8, 9]  # the forest's order, as before
    s.on_trial_complete("t0", {"valid_mrr": 0.3})
    nxt = s.suggest("u0")
    assert (nxt["batch_size"], nxt["dim"]) != (512, 1000)
    with pytest.raises(ConfigError, match="cover_sizes"):
        _production_stage2(cands, dec, 10, 0, cover_sizes="smallest")


def test_the_forests_ties_break_by_stage1_rank(monkeypatch):
    """A forest that scores every candidate alike: the first round goes best stage-1 configuration first; after it,
    the ties go to the best configuration's remaining sizes (stage-1 rank), not to the list's order (which takes
    one size of each configuration in turn)."""
    from kgtuner.search.forest import RollingForest

    monkeypatch.setattr(RollingForest, "predict", lambda self, X, weights=None: np.full(len(X), 0.5))
    dec, prior, top, cands = _top10_case(0)
    s = _production_stage2(cands, dec, 40, 0)
    s.add_prior_observations(prior, "stage1")
    assert s.candidate_configurations().tolist() == [_configuration(c, top) for c in cands]
    ranks = [_configuration(s.suggest(f"t{i}"), top) for i in range(16)]
    assert ranks == list(range(10)) + [0, 0, 0, 1, 1, 1]


def test_after_the_first_round_the_forest_follows_the_full_graph_results():
    """Once every configuration has one full-graph result, the forest decides, and the sizes of a configuration
    already tried are scored with the evidence of its full-graph result: configurations 0-2 (loss not CE, which the
    stage-1 rows disfavour) trained far best on the full graph (the class-1 quarter of the 10 full-graph rows),
    so their other sizes come next, before any size of a CE configuration."""
    for seed in range(3):
        dec, prior, top, cands = _top10_case(seed)
        s = _production_stage2(cands, dec, 1, seed)
        s.add_prior_observations(prior, "stage1")
        for i in range(10):
            cfg = s.suggest(f"t{i}")
            rank = _configuration(cfg, top)
            s.on_trial_complete(f"t{i}", {"valid_mrr": 0.45 - 0.01 * rank if rank < 3 else 0.05})
        nxt = []
        for i in range(3):
            nxt.append(_configuration(s.suggest(f"n{i}"), top))
            s.on_trial_complete(f"n{i}", {"valid_mrr": 0.44})
        assert set(nxt) <= {0, 1, 2}, (seed, nxt)


def test_stage2_rows_are_labelled_among_themselves_not_with_the_stage1_rows():
    """Full-graph MRRs (0.10-0.19) below every subgraph MRR of the prior rows (0.4 for CE): labelled with the prior
    rows, no stage-2 row would be class 1; among themselves, the best quarter is."""
    dec, prior, top, cands = _top10_case(0)
    s = _production_stage2(cands, dec, 1, 0)
    s.add_prior_observations([(c, 0.4 + 0.01 * i, None) for i, (c, _, _) in enumerate(prior)], "stage1")
    for i in range(8):
        s.suggest(f"t{i}")
        s.on_trial_complete(f"t{i}", {"valid_mrr": 0.10 + 0.01 * i})
    X, y = s.training_data()
    assert len(y) == len(prior) + 8
    assert y[len(prior):].tolist() == [0] * 6 + [1] * 2
    assert y[:len(prior)].sum() == int(np.ceil(0.25 * len(prior)))


def test_prior_labels_are_computed_within_each_group():
    """Two groups on different MRR scales: the top quarter of *each* is class 1 (not the top quarter of
    the union, which would be all of the high-scale group)."""
    dec = load_space("decoupled", model="complex")
    s = RFBORESearcher(dec.stage2_space(), metric="valid_mrr", mode="max", seed=0, **FAST)
    rng = np.random.default_rng(0)
    low = [(dec.sample(rng), 0.01 + 0.001 * i, None) for i in range(8)]
    high = [(dec.sample(rng), 0.5 + 0.001 * i, None) for i in range(8)]
    assert s.add_prior_observations(low, "subgraph") + s.add_prior_observations(high, "full") == 16
    labels = s.prior_labels()
    assert labels.tolist() == [0] * 6 + [1] * 2 + [0] * 6 + [1] * 2
    # a row outside the space (an unknown loss) is dropped and counted; sizes outside it are kept
    odd = {**dec.sample(rng), "loss": "Huber"}
    small = {**dec.sample(rng), "batch_size": 64, "dim": 32}
    assert s.add_prior_observations([(odd, 0.3, None), (small, 0.3, None)], "other") == 1
    assert s.prior_dropped == {"other": 1}
    # the state round-trips the priors
    other = RFBORESearcher(dec.stage2_space(), metric="valid_mrr", mode="max", seed=0, **FAST)
    other.set_state(s.get_state())
    assert other.n_prior == 17 and other.prior_labels().tolist() == s.prior_labels().tolist()


def test_exhausted_candidates_explore_the_space_with_the_same_forest():
    from kgtuner.search import make_stage2_searcher

    dec, prior, cands = _region_case(0)
    cands = cands[:8]
    s = make_stage2_searcher({"name": "kgtuner", "stage2_searcher": FAST}, cands, space=dec, max_concurrent=2, seed=0)
    s.add_prior_observations(prior, "stage1")
    got = []
    for i in range(14):
        cfg = s.suggest(f"t{i}")
        assert cfg is not None and cfg != Searcher.FINISHED
        got.append(cfg)
        s.on_trial_complete(f"t{i}", {"valid_mrr": 0.3 if cfg["loss"] == "CE" else 0.05})
    assert all(g in cands for g in got[:8]) and s.candidates_left == 0
    explored = got[8:]
    assert not any(g in cands for g in explored)
    assert all(dec.stage2_space().contains(g) for g in explored)
    assert len({_key(g) for g in got}) == 14
    assert sum(g["loss"] == "CE" for g in explored) >= 4  # the forest, trained on both fidelities, still leads
