"""``RFBORESearcher``: BORE (Tiao et al. 2021) with a random-forest classifier, as in KGTuner.

Each model-based suggestion:

1. labels the finished trials: of the ``n`` fully-trained ones (finished, or stopped at a stage
   deadline) and failures, the best ``ceil(gamma * n)`` successful ones are class 1, all others
   class 0 -- failed or errored trials (no finite metric) rank worst and are always class 0, so the
   forest learns to avoid infeasible regions instead of proposing them again. Trials an
   early-stopping scheduler stopped at a rung (ASHA, ``search.early_stop=asha``; see
   ``SpaceSearcher``) are *low-fidelity* observations: their partial MRR is not used and they do
   not enter ``n`` (the gamma threshold comes from fully-trained trials only); they are added with
   the fixed label 0. Rationale: with eta = 1/gamma (``search.asha.reduction_factor: 4`` and
   ``gamma: 0.25``), a trial stopped at a rung ranked outside the top 1/eta there, i.e. outside
   the top-gamma class. Unlike a failure, nothing says its region is infeasible; it is only "not
   good" by the evidence of its rung;
2. pending trials never come back: no candidate within ``min_distance`` (a fraction of every
   continuous range, same value of every choice) of a finished or pending configuration is
   returned (``pending="exclude"``, the default). ``pending="pseudo_negative"`` additionally adds
   the pending configurations to the training set as class 0 (a pessimistic "constant liar");
   ``"ignore"`` does neither (for comparisons). ``scripts/bench_searcher.py`` compares the three
   with 8 asynchronous workers: on the finite ``kge_discrete`` grid, ignoring pending trials
   re-ran about 3 configurations per 50-evaluation run and found a worse median best (0.575 vs
   0.591 with exclusion); on continuous spaces exclusion and ignoring behave alike; pseudo-negatives
   were better than exclusion on some functions and worse on others across two runs, so they are
   an option, not the default;
3. refits the forest (``kgtuner.search.forest.RollingForest``) if the training data changed;
4. scores ``n_candidates`` candidates in vectorised ``predict_proba`` calls: random samples, then
   (``local_fraction`` of the pool) one/two-parameter mutations of the best-scoring samples, a
   local refinement of the acquisition as in BORE; returns the most probable class-1 candidate
   that is not a near-duplicate. Measured on the test functions of ``kgtuner.search.objectives``
   (10 seeds, 60 evaluations, median best): mutating the best *observed* configurations made the
   search greedy (branin_mixed -7.0, random search -6.1); refining the best candidates
   (``local_fraction=0.25``) gave -2.7 / 0.520 (kge_surrogate), random candidates alone -1.5 /
   0.521 at one ``predict_proba`` pass instead of two, hence the default ``local_fraction=0``.

The first ``n_initial`` finished trials are random. In finite-candidate mode (``candidates=[...]``,
KGTuner's stage 2) the forest scores the not-yet-proposed candidates instead and each candidate is
proposed at most once; ``Searcher.FINISHED`` follows the last one.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from kgtuner.errors import ConfigError
from kgtuner.search.base import SpaceSearcher
from kgtuner.search.candidates import first_novel, generate
from kgtuner.search.forest import RollingForest

PENDING_STRATEGIES = ("pseudo_negative", "exclude", "ignore")
INITIAL_ORDERS = ("random", "ordered")


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
        Random suggestions until this many trials have finished; default ``max(10, max_concurrent)``.
    gamma : float
        Fraction of the finished trials labelled class 1 (0.25 as in BORE/KGTuner).
    n_trees, trees_per_fit : int
        Forest size, and trees refit per update (see ``RollingForest``; None = refit all).
    n_candidates : int
        Candidates scored per suggestion; ``local_fraction`` of them are mutations of the
        ``n_parents`` best-scoring random candidates, moved by ``mutation_scale`` (unit scale).
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
        top stage-1 configuration once, best first, before any second expansion).
    n_jobs : int
        Threads for the forest (scikit-learn ``n_jobs``).
    """

    def __init__(self, space: Any = None, metric: str | None = None, mode: str | None = "max",
                 n_initial: int | None = None, gamma: float = 0.25, n_trees: int = 200,
                 trees_per_fit: int | None = 40, n_candidates: int = 2048, local_fraction: float = 0.0,
                 n_parents: int = 10, mutation_scale: float = 0.1, pending: str = "exclude",
                 seed: int = 0, candidates: Sequence[Mapping[str, Any]] | None = None,
                 max_concurrent: int | None = None, min_distance: float = 0.01, n_jobs: int | None = 1,
                 initial: str = "random"):
        checks = [
            (n_initial is None or int(n_initial) >= 1, "n_initial must be >= 1 (or null for the default)"),
            (0 < float(gamma) < 1, "gamma must be in (0, 1)"),
            (int(n_trees) >= 1, "n_trees must be >= 1"),
            (trees_per_fit is None or int(trees_per_fit) >= 1, "trees_per_fit must be >= 1 or null"),
            (int(n_candidates) >= 1, "n_candidates must be >= 1"),
            (0 <= float(local_fraction) <= 1, "local_fraction must be in [0, 1]"),
            (int(n_parents) >= 1, "n_parents must be >= 1"),
            (float(mutation_scale) > 0, "mutation_scale must be > 0"),
            (pending in PENDING_STRATEGIES, f"pending must be one of {PENDING_STRATEGIES}"),
            (initial in INITIAL_ORDERS, f"initial must be one of {INITIAL_ORDERS}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(f"RFBORESearcher: {msg} (got n_initial={n_initial!r}, gamma={gamma!r}, "
                                  f"n_trees={n_trees!r}, trees_per_fit={trees_per_fit!r}, "
                                  f"n_candidates={n_candidates!r}, pending={pending!r})")
        self.n_initial = None if n_initial is None else int(n_initial)
        self.gamma = float(gamma)
        self.n_candidates = int(n_candidates)
        self.local_fraction = float(local_fraction)
        self.n_parents = int(n_parents)
        self.mutation_scale = float(mutation_scale)
        self.pending = pending
        self.initial = initial
        self._forest = RollingForest(int(n_trees), trees_per_fit, n_jobs=n_jobs)
        super().__init__(space, metric, mode, seed, candidates, max_concurrent, min_distance)

    def _reset_history(self) -> None:
        super()._reset_history()
        self._forest.reset()
        self._fit_key: tuple | None = None
        self._n_fits = 0

    @property
    def effective_n_initial(self) -> int:
        return self.n_initial if self.n_initial is not None else max(10, self.max_concurrent or 1)

    # -- the model ---------------------------------------------------------------------------
    def _labels(self) -> np.ndarray:
        """Class 1 = the best ``ceil(gamma * n)`` successful trials of the ``n`` fully-trained or
        failed ones; failures and low-fidelity (early-stopped) trials are 0, the latter outside ``n``."""
        scores = np.array(self._obs_scores, dtype=np.float64)
        low = self._low_mask()
        ok = np.flatnonzero(~np.isnan(scores) & ~low)
        n1 = min(len(ok), max(1, math.ceil(self.gamma * int((~low).sum()))))
        best = ok[np.argsort(-scores[ok], kind="stable")[:n1]]
        y = np.zeros(len(scores), dtype=np.int64)
        y[best] = 1
        return y

    def _model_ready(self) -> bool:
        """Enough finished trials (low-fidelity ones count) and at least one successful fully-trained one."""
        n = len(self._obs_scores)
        return n >= self.effective_n_initial and n >= 2 and not all(math.isnan(s) for s in self._obs_scores)

    def _fit(self) -> np.ndarray:
        """(Re)fit the forest when the data changed; returns the labels of the finished trials."""
        y_obs = self._labels()
        use_pending = self.pending == "pseudo_negative"
        key = (len(self._obs_scores), tuple(self._pending) if use_pending else ())
        if key != self._fit_key or not self._forest.fitted:
            rows = list(self._obs_rows) + ([v[0] for v in self._pending.values()] if use_pending else [])
            X = self._space.encode_array(np.array(rows))
            y = np.concatenate([y_obs, np.zeros(len(rows) - len(y_obs), dtype=np.int64)])
            seed = int(np.random.SeedSequence([self.seed, self._n_fits]).generate_state(1)[0] % (2**31 - 1))
            self._forest.update(X, y, seed)
            self._n_fits += 1
            self._fit_key = key
        return y_obs

    def acquisition(self, X: np.ndarray) -> np.ndarray:
        """Predicted class-1 probability of internal rows (the forest must be fitted)."""
        return self._forest.predict(self._space.encode_array(X))

    # -- proposals ---------------------------------------------------------------------------
    def _propose_row(self) -> np.ndarray:
        include_pending = self.pending != "ignore"
        if not self._model_ready():
            return self._random_row(include_pending)
        self._fit()
        n_local = int(round(self.n_candidates * self.local_fraction))
        cand = generate(self._space, self._rng, self.n_candidates - n_local)
        p = self.acquisition(cand)
        if n_local:
            # local refinement of the acquisition (as in BORE): mutate the best-scoring candidates
            parents = cand[np.argsort(-p, kind="stable")[: self.n_parents]]
            local = self._space.mutate_array(self._rng, parents, n_local, self.mutation_scale)
            cand, p = np.vstack([cand, local]), np.concatenate([p, self.acquisition(local)])
        order = np.argsort(-p, kind="stable")
        i = first_novel(self._space, cand, order, self._taken_rows(include_pending), self.min_distance)
        return cand[i] if i is not None else self._random_row(include_pending)

    def _propose_index(self, remaining: np.ndarray) -> int:
        if not self._model_ready():
            if self.initial == "ordered":  # the candidates' own order (stage 2: stage-1 rank first)
                return int(np.min(remaining))
            return int(self._rng.choice(remaining))
        self._fit()
        p = self.acquisition(self._cand_rows[remaining])
        return int(remaining[int(np.argmax(p))])

    # -- state -------------------------------------------------------------------------------
    def get_state(self) -> dict:
        state = super().get_state()
        state.update(forest=self._forest.get_state(), fit_key=self._fit_key, n_fits=self._n_fits,
                     n_initial=self.n_initial, gamma=self.gamma)
        return state

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        self.n_initial, self.gamma = state["n_initial"], state["gamma"]
        self._forest.set_state(state["forest"])
        self._fit_key, self._n_fits = state["fit_key"], state["n_fits"]
