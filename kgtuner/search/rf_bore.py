"""``RFBORESearcher``: BORE (Tiao et al. 2021) with a random-forest classifier, as in KGTuner.

Each model-based suggestion:

1. labels the finished trials: of the ``n`` fully-trained ones and failures, the best
   ``ceil(gamma * n)`` successful ones are class 1, all others class 0 -- failed or errored trials (no finite metric) rank worst and are always class 0, so the
   forest learns to avoid infeasible regions instead of proposing them again. Trials an
   early-stopping scheduler stopped at a rung (ASHA, ``search.early_stop=asha``; see
   ``SpaceSearcher``) are *low-fidelity* observations: their partial MRR is not used and they do
   not enter ``n`` (the gamma threshold comes from fully-trained trials only); they are added with
   the fixed label 0. Rationale: with eta = 1/gamma (``search.asha.reduction_factor: 4`` and
   ``gamma: 0.25``), a trial stopped at a rung ranked outside the top 1/eta there, i.e. outside
   the top-gamma class. Unlike a failure, nothing says its region is infeasible; it is only "not
   good" by the evidence of its rung. A trial *cut* at a stage deadline (KGTuner's stage 1 at the
   switch) is a censored observation: its MRR so far is a lower bound, so it is class 1 when that
   bound reaches the fully-trained trials' class-1 threshold, and otherwise is treated as
   low-fidelity (class 0, outside ``n``);
2. pending trials never come back: no candidate within ``min_distance`` (a fraction of every
   continuous range, same value of every choice) of a finished or pending configuration is
   returned (``pending="exclude"``, the default). ``pending="pseudo_negative"`` additionally adds
   the pending configurations to the training set as class 0 (a pessimistic "constant liar");
   ``"ignore"`` does neither (for comparisons);
3. refits the whole forest (``kgtuner.search.forest.RollingForest``) when the training data
   changed, as the reference code does after every trial (``trees_per_fit`` refits only the
   oldest slice instead: cheaper, staler);
4. scores ``n_candidates`` (10,000, the reference code's pool) random candidates in vectorised
   ``predict_proba`` calls and returns the most probable class-1 candidate that is not a
   near-duplicate. ``evolve_rounds`` > 0 adds the reference code's evolutionary refinement
   (:func:`kgtuner.search.candidates.evolve`: 20 % fresh, 40 % one/two-parameter mutations, 40 %
   uniform crossovers of the ``n_parents`` best-scoring candidates and the class-1 observations,
   ``n_offspring`` per round). It is off by default: with 8 workers it made the search greedy
   (mean rank 5.50 against 3.40 for the random pool alone over 5 objectives x 5 seeds, see below);
5. batches of concurrent suggestions are diversified (``batch="thompson"``, the default): while
   other trials are pending, a suggestion maximises the mean of a random draw of
   ``thompson_trees`` of the forest's trees instead of the whole forest -- a Thompson-style sample
   of the bootstrap ensemble (each tree is fit on its own bootstrap sample), so the up to 8
   suggestions made from one forest for 8 GPUs go to different plausible optima rather than
   crowding around the single argmax. A suggestion with nothing pending uses the whole forest,
   exactly as the sequential algorithm of the paper. ``batch="none"`` turns this off.

``scripts/benchmarks/bench_searcher.py`` compares these choices with 8 asynchronous workers, on the
synthetic objectives of ``kgtuner.search.objectives`` and on surrogates of real KGE searches
(``TableObjective``: 200 real ComplEx trainings on the demo graph, 120 on codex-s's stage-1
subgraph, ``docs/benchmarks/kge_tables``). Mean rank over 5 objectives x 5 seeds (1 = best of 8):
10,000 random candidates + full refit + Thompson draws 3.40, TPE 3.68, the previous defaults
(2,048 candidates, 40 of 200 trees refit, no batch strategy) 3.72, 2,048 candidates + full refit
with Thompson draws and pseudo-negatives 4.44, with Thompson draws 4.46, without either 4.52, the
reference's evolution + full refit + Thompson draws 5.50, random search 6.28. The defaults follow
the best row.

The first suggestions are random until the labels hold both classes (the reference code fits as soon as
it has an observation of each class, so it is model-based from its third trial); ``n_initial`` asks
for that many finished trials first instead. In finite-candidate mode (``candidates=[...]``,
KGTuner's stage 2) the forest scores the not-yet-proposed candidates instead and each candidate is
proposed at most once; ``Searcher.FINISHED`` follows the last one, or (``exhausted="explore"``, the
reference's stage 2) RF+BORE goes on over the whole space with the same forest.

Candidates that differ only in their fidelity sizes (``FIDELITY_KEYS``: one stage-1 configuration's
expansions) form one *configuration*, ranked by its first appearance in the list (KGTuner's
``stage2_candidates`` lists every top configuration once, best first, before any second size). The
forest's ties break by that rank, then by the list's order. ``cover=True`` (KGTuner's stage 2) proposes
every configuration once, the forest choosing the order, before any configuration's second size: a
forest fitted on stage-1 rows, which all share one batch size and dimension, cannot split on size and
scores a configuration's expansions alike, so without it the 8 slots of a switch filled with the four
sizes of the top-scored configuration and the four of the next (issue 37). After that round the forest
alone decides, the sizes of a configuration already tried scored with the evidence of its full-graph
rows (labelled among themselves). Which size a configuration gets in that round: the forest's (its ties
break by list order, which rotates the sizes over the configurations), or (``cover_sizes="cheapest"``)
its cheapest expansion (smallest product of the fidelity sizes), so a small stage-2 budget trains more
configurations and the first full-graph answer comes sooner; the forest then grows the sizes of the
configurations its evidence favours.

Prior observations (:meth:`RFBORESearcher.add_prior_observations`, the reference's ``pretrain``)
warm-start the forest with rows of another fidelity or run, labelled within their own group
(``BORE_convert_batch_labels``): KGTuner's stage-2 forest starts from every stage-1 row, so it ranks
the expanded candidates from the first stage-2 suggestion.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from kgtuner.errors import ConfigError
from kgtuner.search.base import CUT, SpaceSearcher
from kgtuner.search.candidates import evolve, first_novel
from kgtuner.search.forest import RollingForest
from kgtuner.validation import number

PENDING_STRATEGIES = ("pseudo_negative", "exclude", "ignore")
INITIAL_ORDERS = ("random", "ordered")
BATCH_STRATEGIES = ("thompson", "none")
EXHAUSTED_POLICIES = ("explore", "finish")
COVER_SIZES = ("forest", "cheapest")
#: Keys of a prior observation that may lie outside this searcher's values: the fidelity's sizes
#: (stage-1 rows at batch 128 / dim 100 beside stage-2 candidates at 512-1024 / 1000-2000).
FIDELITY_KEYS = ("batch_size", "dim")


def bore_labels(scores: np.ndarray, low: np.ndarray, gamma: float, cut: np.ndarray | None = None) -> np.ndarray:
    """BORE's classes of one group of observations: the best ``ceil(gamma * n)`` successful ones of
    the ``n`` fully-trained or failed ones are 1; failures (NaN) and low-fidelity rows (``low``:
    stopped early at a rung, outside ``n``) are 0. A row ``cut`` at a stage deadline holds a lower bound
    of its MRR (a censored observation): class 1 when that bound already reaches the class-1 threshold,
    else 0 and, as a low-fidelity row, outside ``n``. Without any successful fully-trained row the cut
    rows are labelled as fully-trained ones (their bounds are all there is)."""
    scores = np.asarray(scores, dtype=np.float64)
    low = np.asarray(low, dtype=bool)
    cut = np.zeros(len(scores), dtype=bool) if cut is None else np.asarray(cut, dtype=bool) & ~np.isnan(scores)
    full = ~low & ~cut
    ok = np.flatnonzero(~np.isnan(scores) & full)
    if not len(ok) and cut.any():
        return bore_labels(scores, low, gamma)
    n1 = min(len(ok), max(1, math.ceil(gamma * int(full.sum()))))
    best = ok[np.argsort(-scores[ok], kind="stable")[:n1]]
    y = np.zeros(len(scores), dtype=np.int64)
    y[best] = 1
    if n1 and cut.any():
        threshold = scores[best].min()
        y[cut & (np.nan_to_num(scores, nan=-np.inf) >= threshold)] = 1
    return y


class RFBORESearcher(SpaceSearcher):
    """RF+BORE as a Ray Tune ``Searcher``.

    Parameters
    ----------
    space : SearchSpace | str | dict | None
        A kgtuner space (or its name/path), a Ray ``param_space``, or None to take Ray's
        ``param_space`` through ``set_search_properties``.
    metric, mode : str
        What to optimise; ``metric=None`` takes Ray's (``set_search_properties``), else
        ``valid_mrr``. ``None`` values passed by Ray are ignored.
    n_initial : int, optional
        Random suggestions until this many trials have finished; default None: until the labels hold
        both classes (two finished trials of different values, or one and a failure), as the reference.
    gamma : float
        Fraction of the finished trials labelled class 1 (0.25 as in BORE/KGTuner).
    n_trees, trees_per_fit : int
        Forest size, and trees refit per update (see ``RollingForest``; None = refit all, the default).
    n_candidates : int
        Random candidates scored per suggestion.
    evolve_rounds, n_offspring, n_parents, mutation_scale :
        Evolutionary refinement of the candidates: rounds, offspring per round, parents (best-scoring
        candidates plus class-1 observations) and the mutation step (unit scale).
    batch : {"thompson", "none"}
        Diversification of concurrent suggestions (see the module docstring).
    thompson_trees : int
        Trees in each Thompson-style draw (``batch="thompson"``).
    pending : {"pseudo_negative", "exclude", "ignore"}
        How pending trials enter the model (see the module docstring).
    seed : int
        Seeds every random choice and the forest: same seed and calls, same suggestions.
    candidates : list of dict, optional
        Finite-candidate mode (stage 2).
    max_concurrent : int, optional
        Cap on pending trials (also set by Ray's ``ConcurrencyLimiter``).
    min_distance : float
        Near-duplicate tolerance as a fraction of each continuous range.
    initial : {"random", "ordered"}
        Finite-candidate mode only: the first ``n_initial`` suggestions are random candidates, or
        the candidates in the order given (KGTuner's stage 2: ``stage2_candidates`` lists every
        top stage-1 configuration once, best first, before any second expansion). Not used once
        prior observations are added: the forest then picks from the first suggestion.
    exhausted : {"finish", "explore"}
        Finite-candidate mode only: after the last candidate, ``Searcher.FINISHED``, or RF+BORE
        over the whole ``space`` (KGTuner's stage 2: the decoupled space at stage-2 sizes).
    cover : bool
        Finite-candidate mode only: every configuration (candidates equal up to ``FIDELITY_KEYS``) is
        proposed once before any configuration's second size (see the module docstring).
    cover_sizes : {"forest", "cheapest"}
        With ``cover``: the size each configuration gets in that first round.
    n_jobs : int
        Threads for the forest (scikit-learn ``n_jobs``).
    points_to_evaluate : list of dict, optional
        Configurations suggested first, in order (Ray Tune's name), each checked against the space.
    """

    def __init__(self, space: Any = None, metric: str | None = None, mode: str | None = "max",
                 n_initial: int | None = None, gamma: float = 0.25, n_trees: int = 200,
                 trees_per_fit: int | None = None, n_candidates: int = 10000, evolve_rounds: int = 0,
                 n_offspring: int = 1024, n_parents: int = 32, mutation_scale: float = 0.1,
                 batch: str = "thompson", thompson_trees: int = 20, pending: str = "exclude",
                 seed: int = 0, candidates: Sequence[Mapping[str, Any]] | None = None,
                 max_concurrent: int | None = None, min_distance: float = 0.01, n_jobs: int | None = 1,
                 initial: str = "random", exhausted: str = "finish", cover: bool = False,
                 cover_sizes: str = "forest", points_to_evaluate: Sequence[Mapping[str, Any]] | None = None):
        def whole(name: str, value: Any, minimum: int, allow_none: bool = False) -> int | None:
            return number(f"RFBORESearcher: {name}", value, integer=True, minimum=minimum, allow_none=allow_none)

        for name, value, options in (("batch", batch, BATCH_STRATEGIES), ("pending", pending, PENDING_STRATEGIES),
                                     ("initial", initial, INITIAL_ORDERS),
                                     ("exhausted", exhausted, EXHAUSTED_POLICIES),
                                     ("cover_sizes", cover_sizes, COVER_SIZES)):
            if value not in options:
                raise ConfigError(f"RFBORESearcher: {name} must be one of {options}, got {value!r}")
        self.n_initial = whole("n_initial", n_initial, 1, allow_none=True)
        self.gamma = number("RFBORESearcher: gamma", gamma, minimum=0, low_open=True, maximum=1, high_open=True)
        n_trees = whole("n_trees", n_trees, 1)
        trees_per_fit = whole("trees_per_fit", trees_per_fit, 1, allow_none=True)
        self.n_candidates = whole("n_candidates", n_candidates, 1)
        self.evolve_rounds = whole("evolve_rounds", evolve_rounds, 0)
        self.n_offspring = whole("n_offspring", n_offspring, 1)
        self.n_parents = whole("n_parents", n_parents, 1)
        self.mutation_scale = number("RFBORESearcher: mutation_scale", mutation_scale, minimum=0, low_open=True)
        self.batch = batch
        self.thompson_trees = whole("thompson_trees", thompson_trees, 1)
        self.pending = pending
        self.initial = initial
        self.exhausted = exhausted
        if not isinstance(cover, bool):
            raise ConfigError(f"RFBORESearcher: cover must be true or false, got {cover!r}")
        self.cover = cover
        self.cover_sizes = cover_sizes
        self._forest = RollingForest(n_trees, trees_per_fit, n_jobs=n_jobs)
        super().__init__(space, metric, mode, seed, candidates, max_concurrent, min_distance, points_to_evaluate)

    def _reset_history(self) -> None:
        super()._reset_history()
        self._forest.reset()
        self._fit_key: tuple | None = None
        self._n_fits = 0
        self._reset_priors()

    def _reset_priors(self) -> None:
        self._prior_X = np.empty((0, self._space.n_features if self._space is not None else 0))
        self._prior_scores: list[float] = []   # higher is better; NaN = failed
        self._prior_low: list[bool] = []       # stopped early at a rung (low-fidelity within its group)
        self._prior_cut: list[bool] = []       # stopped at a stage deadline: the value is a lower bound
        self._prior_groups: list[str] = []     # label group (source and fidelity) of each prior row
        self._prior_dropped: dict[str, int] = {}
        self._prior_taken: list[np.ndarray] = []  # internal rows of same-fidelity priors: never proposed again

    # -- prior observations --------------------------------------------------------------------
    def add_prior_observations(self, observations, group: str, free: Sequence[str] = FIDELITY_KEYS,
                               same_fidelity: bool = False) -> int:
        """Warm-start the forest with observations made elsewhere: another fidelity (KGTuner's stage 1
        on the subgraph at small sizes) or an earlier run, as the reference's ``RF_HPO.pretrain``.

        ``observations``: ``(config, value, rung)`` triples -- ``value`` the metric (None: failed),
        ``rung`` None for a fully-trained run, ``CUT`` for one stopped at a stage deadline (its value a
        lower bound), else the rung it was stopped at (ASHA: low-fidelity).
        Their BORE labels are computed *within* ``group`` (its own top ``gamma``), never against this
        searcher's own results or another group's, so MRR scales of different graphs or sizes are not
        mixed. ``free`` keys may take values outside this space (the fidelity's sizes, raw features);
        a configuration with any other value outside the space is dropped (counted in
        :attr:`prior_dropped`). With priors the forest acts from the first suggestion (no random
        ``n_initial``). ``same_fidelity``: the rows were measured as this search measures (same graph
        and sizes), so their configurations are not proposed again (nor a near-duplicate, nor such a
        candidate). Returns the number of rows kept."""
        obs = list(observations)
        if not obs:
            return 0
        X, kept = self._space.encode_foreign([o[0] for o in obs], free=free)
        sign = 1.0 if self._mode != "min" else -1.0
        for (cfg, value, rung), k in zip(obs, kept):
            if not k:
                continue
            bad = value is None or not isinstance(value, (int, float)) or not math.isfinite(float(value))
            cut = rung == CUT
            self._prior_scores.append(math.nan if bad or (rung is not None and not cut) else sign * float(value))
            self._prior_low.append(rung is not None and not cut and not bad)
            self._prior_cut.append(cut and not bad)
            self._prior_groups.append(str(group))
        self._prior_X = np.vstack([self._prior_X.reshape(-1, X.shape[1]), X])
        if same_fidelity:
            for (cfg, _, _), k in zip(obs, kept):
                if k and self._space.contains(cfg):
                    self._prior_taken.append(self._space.to_array([cfg])[0])
                    self._mark_candidate(cfg)
        dropped = int((~kept).sum())
        if dropped:
            self._prior_dropped[str(group)] = self._prior_dropped.get(str(group), 0) + dropped
        self._forest.reset()  # the data changed: the next fit is a full one
        self._fit_key = None
        return int(kept.sum())

    @property
    def n_prior(self) -> int:
        """Prior observations the forest is warm-started with."""
        return len(self._prior_scores)

    @property
    def prior_dropped(self) -> dict[str, int]:
        """Prior configurations dropped per group (outside this space)."""
        return dict(self._prior_dropped)

    def prior_labels(self) -> np.ndarray:
        """BORE classes of the prior rows, each group labelled among its own rows."""
        y = np.zeros(self.n_prior, dtype=np.int64)
        groups = np.array(self._prior_groups, dtype=object)
        scores, low = np.array(self._prior_scores, dtype=np.float64), np.array(self._prior_low, dtype=bool)
        cut = np.array(self._prior_cut, dtype=bool)
        for g in dict.fromkeys(self._prior_groups):
            idx = np.flatnonzero(groups == g)
            y[idx] = bore_labels(scores[idx], low[idx], self.gamma, cut[idx])
        return y

    @property
    def effective_n_initial(self) -> int:
        """Finished trials before the forest acts: ``n_initial``, or 2 (the reference: one of each class)."""
        return self.n_initial if self.n_initial is not None else 2

    # -- the model ---------------------------------------------------------------------------
    def _labels(self) -> np.ndarray:
        """Class 1 = the best ``ceil(gamma * n)`` successful trials of the ``n`` fully-trained or
        failed ones; failures and low-fidelity (early-stopped) trials are 0, the latter outside ``n``."""
        if not self._obs_scores:
            return np.zeros(0, dtype=np.int64)
        return bore_labels(np.array(self._obs_scores, dtype=np.float64), self._low_mask(), self.gamma,
                           self._cut_mask())

    def _model_ready(self) -> bool:
        """The labels hold both classes (the reference fits then, and draws at random before), after
        ``n_initial`` finished trials (low-fidelity ones count) when it is set; with prior observations,
        from the first suggestion where the labels allow it."""
        if self.n_prior:
            y = np.concatenate([self.prior_labels(), self._labels()])
            return len(y) >= 2 and 0 < int(y.sum()) < len(y)
        if len(self._obs_scores) < self.effective_n_initial:
            return False
        y = self._labels()
        return 0 < int(y.sum()) < len(y)

    def _fit(self) -> np.ndarray:
        """(Re)fit the forest when the data changed; returns the labels of the finished trials."""
        y_obs = self._labels()
        use_pending = self.pending == "pseudo_negative"
        key = (self.n_prior, len(self._obs_scores), tuple(self._pending) if use_pending else ())
        if key != self._fit_key or not self._forest.fitted:
            X, y = self.training_data(y_obs)
            seed = int(np.random.SeedSequence([self.seed, self._n_fits]).generate_state(1)[0] % (2**31 - 1))
            self._forest.update(X, y, seed)
            self._n_fits += 1
            self._fit_key = key
        return y_obs

    def training_data(self, y_obs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The forest's training set (encoded rows, BORE classes): the prior rows, each group labelled among
        its own rows, then this searcher's finished trials labelled among themselves (a stage-2 forest's
        full-graph rows never compete with stage 1's subgraph MRRs), then (``pending="pseudo_negative"``) the
        pending configurations as class 0."""
        y_obs = self._labels() if y_obs is None else y_obs
        rows = list(self._obs_rows) + ([v[0] for v in self._pending.values()]
                                       if self.pending == "pseudo_negative" else [])
        X = self._space.encode_array(np.array(rows).reshape(len(rows), len(self._space)))
        y = np.concatenate([y_obs, np.zeros(len(rows) - len(y_obs), dtype=np.int64)])
        if self.n_prior:
            X = np.vstack([self._prior_X, X])
            y = np.concatenate([self.prior_labels(), y])
        return X, y

    def acquisition(self, X: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Predicted class-1 probability of internal rows (the forest must be fitted); ``weights``:
        per-tree weights of a Thompson-style draw (None: the whole forest)."""
        return self._forest.predict(self._space.encode_array(X), weights)

    def _tree_weights(self) -> np.ndarray | None:
        """A Thompson-style draw over the trees while other trials are pending (``batch="thompson"``):
        ``thompson_trees`` trees drawn without replacement, equal weights; None otherwise."""
        n = self._forest.n_trees
        if self.batch != "thompson" or not self._pending or self.thompson_trees >= n:
            return None
        w = np.zeros(n)
        w[self._rng.choice(n, size=self.thompson_trees, replace=False)] = 1.0 / self.thompson_trees
        return w

    def _taken_rows(self, include_pending: bool = True) -> np.ndarray:
        rows = super()._taken_rows(include_pending)
        return np.vstack([rows, np.array(self._prior_taken)]) if self._prior_taken else rows

    def _good_rows(self, y_obs: np.ndarray) -> np.ndarray:
        """Internal rows of the class-1 observations (parents of the evolutionary refinement)."""
        rows = [r for r, label in zip(self._obs_rows, y_obs) if label == 1]
        return np.array(rows) if rows else np.empty((0, len(self._space)))

    def _propose_row(self) -> np.ndarray:
        include_pending = self.pending != "ignore"
        if not self._model_ready():
            return self._random_row(include_pending)
        y_obs = self._fit()
        weights = self._tree_weights()
        cand = self._space.sample_array(self._rng, self.n_candidates)
        p = self.acquisition(cand, weights)
        good = self._good_rows(y_obs)
        for _ in range(self.evolve_rounds):
            parents = np.vstack([cand[np.argsort(-p, kind="stable")[: self.n_parents]], good])
            kids = evolve(self._space, self._rng, parents, self.n_offspring, self.mutation_scale)
            if len(kids):
                cand, p = np.vstack([cand, kids]), np.concatenate([p, self.acquisition(kids, weights)])
        order = np.argsort(-p, kind="stable")
        i = first_novel(self._space, cand, order, self._taken_rows(include_pending), self.min_distance)
        return cand[i] if i is not None else self._random_row(include_pending)

    def candidate_configurations(self) -> np.ndarray:
        """Finite-candidate mode: each candidate's configuration (the candidate without its
        ``FIDELITY_KEYS``) as its rank of first appearance in the candidate list (stage 2: its stage-1 rank)."""
        ranks: dict[tuple, int] = {}
        out = np.empty(len(self._candidate_cfgs), dtype=np.int64)
        for i, cfg in enumerate(self._candidate_cfgs):
            key = tuple(sorted((k, repr(v)) for k, v in cfg.items() if k not in FIDELITY_KEYS))
            out[i] = ranks.setdefault(key, len(ranks))
        return out

    def _uncovered(self, remaining: np.ndarray) -> np.ndarray:
        """``cover``: the remaining candidates of configurations none of whose sizes was proposed yet (all
        remaining ones once every configuration was)."""
        if not self.cover:
            return remaining
        conf = self.candidate_configurations()
        fresh = remaining[~np.isin(conf[remaining], conf[self._used])]
        if not len(fresh):
            return remaining
        if self.cover_sizes == "cheapest":  # each configuration's cheapest expansion only
            cost = np.array([math.prod(float(c.get(k, 1)) for k in FIDELITY_KEYS) for c in self._candidate_cfgs])
            cheapest = {int(g): cost[fresh][conf[fresh] == g].min() for g in np.unique(conf[fresh])}
            fresh = fresh[cost[fresh] == np.array([cheapest[int(g)] for g in conf[fresh]])]
        return fresh

    def _propose_index(self, remaining: np.ndarray) -> int:
        remaining = self._uncovered(remaining)
        if not self._model_ready():
            if self.initial == "ordered":  # the candidates' own order (stage 2: stage-1 rank first)
                return int(np.min(remaining))
            return int(self._rng.choice(remaining))
        self._fit()
        p = self.acquisition(self._cand_rows[remaining], self._tree_weights())
        # the most probable class-1 candidate; ties by configuration rank (stage 2: stage-1 rank), then list order
        best = np.lexsort((remaining, self.candidate_configurations()[remaining], -p))[0]
        return int(remaining[best])

    # -- state -------------------------------------------------------------------------------
    def get_state(self) -> dict:
        state = super().get_state()
        state.update(forest=self._forest.get_state(), fit_key=self._fit_key, n_fits=self._n_fits,
                     n_initial=self.n_initial, gamma=self.gamma, exhausted=self.exhausted,
                     prior_X=self._prior_X.copy(), prior_scores=list(self._prior_scores),
                     prior_low=list(self._prior_low), prior_cut=list(self._prior_cut), prior_groups=list(self._prior_groups),
                     prior_dropped=dict(self._prior_dropped), prior_taken=[r.copy() for r in self._prior_taken])
        return state

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        self.n_initial, self.gamma = state["n_initial"], state["gamma"]
        self.exhausted = state.get("exhausted", self.exhausted)
        if state.get("prior_scores"):
            self._prior_X = np.asarray(state["prior_X"], dtype=np.float64).copy()
            self._prior_scores = [float(v) for v in state["prior_scores"]]
            self._prior_low = [bool(v) for v in state["prior_low"]]
            self._prior_cut = [bool(v) for v in state.get("prior_cut") or [False] * len(self._prior_scores)]
            self._prior_groups = [str(v) for v in state["prior_groups"]]
            self._prior_dropped = {str(k): int(v) for k, v in (state.get("prior_dropped") or {}).items()}
            self._prior_taken = [np.asarray(r, dtype=np.float64).copy() for r in state.get("prior_taken") or []]
        self._forest.set_state(state["forest"])
        self._fit_key, self._n_fits = state["fit_key"], state["n_fits"]
        if isinstance(self._fit_key, list):  # JSON: tuples come back as lists
            self._fit_key = tuple(tuple(k) if isinstance(k, list) else k for k in self._fit_key)
