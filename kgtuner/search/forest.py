"""The random-forest classifier of RF+BORE, refreshed a slice at a time.

Fitting ~200 scikit-learn trees on the few hundred rows of a search costs several ms per tree, almost all of it
the per-tree work of ``RandomForestClassifier.fit`` around the tree builder (cloning each tree, validating its
targets and weights again); RF+BORE refits after every trial. :class:`TreeChunk` builds the very same trees
with scikit-learn's own tree builder and splitter, drawing every random number as
``RandomForestClassifier(n_estimators, random_state=seed)`` does, without the per-tree checks (done once per
chunk here): the same trees and the same probabilities, bit for bit. The first use checks that against
``RandomForestClassifier`` on a small problem and falls back to it if this scikit-learn builds its forests
otherwise (:func:`fast_trees_available`).

The forest is kept as ``ceil(n_trees / trees_per_fit)`` chunks: the first fit builds all of them, and every
later update (only when the training data changed) refits just the oldest chunk on the current data. The
prediction averages all trees, so the ensemble keeps ``n_trees`` trees while an update costs ``trees_per_fit``
trees; each tree lags at most ``n_chunks - 1`` updates behind. ``trees_per_fit=None`` (or >= ``n_trees``)
refits the whole forest every time (the default of RF+BORE, the reference code's rule).
"""

from __future__ import annotations

import logging
import math

import numpy as np
from sklearn.ensemble import RandomForestClassifier

log = logging.getLogger(__name__)
_MAX_INT = np.iinfo(np.int32).max


def _max_features(max_features, n_features: int) -> int:
    """The number of features a split draws from, as scikit-learn's trees resolve ``max_features``."""
    if max_features == "sqrt":
        return max(1, int(np.sqrt(n_features)))
    if max_features == "log2":
        return max(1, int(np.log2(n_features)))
    if max_features is None:
        return n_features
    if isinstance(max_features, (int, np.integer)):
        return int(max_features)
    return max(1, int(float(max_features) * n_features)) if float(max_features) > 0 else 0


class TreeChunk:
    """The trees of ``RandomForestClassifier(n_estimators, random_state=seed, min_samples_leaf, max_features)``
    fit on ``(X, y)``, built with scikit-learn's tree builder without its per-tree checks.

    ``y`` holds two classes (0 and 1). ``proba1(X)`` is the forest's ``predict_proba(X)[:, 1]`` and
    ``tree_proba1(X, trees)`` each listed tree's, computed as scikit-learn does (the same sums in the same order).
    """

    def __init__(self, n_estimators: int, seed: int, min_samples_leaf: int = 1, max_features="sqrt"):
        self.n_estimators, self.seed = int(n_estimators), int(seed)
        self.min_samples_leaf, self.max_features = int(min_samples_leaf), max_features

    def fit(self, X: np.ndarray, y: np.ndarray) -> "TreeChunk":
        from sklearn.tree._criterion import Gini
        from sklearn.tree._splitter import BestSplitter
        from sklearn.tree._tree import DepthFirstTreeBuilder, Tree

        X = np.ascontiguousarray(X, dtype=np.float32)
        classes, encoded = np.unique(np.asarray(y).ravel(), return_inverse=True)
        if not np.array_equal(classes, [0, 1]) or not np.isfinite(X).all():
            raise ValueError("TreeChunk needs the labels 0 and 1, both present, and finite features")
        self.classes_ = classes
        Y = np.ascontiguousarray(encoded.reshape(-1, 1), dtype=np.float64)
        n, n_features = X.shape
        n_classes = np.array([2], dtype=np.intp)
        max_features = _max_features(self.max_features, n_features)
        min_split = max(2, 2 * self.min_samples_leaf)
        seeds = np.random.RandomState(self.seed)
        # RandomState(tree_seed) twice per tree, as scikit-learn makes them (the bootstrap draw, and the splitter's,
        # drawn when the tree is built): two generators re-seeded per tree, cheaper than new ones
        split_rng, boot_rng = np.random.RandomState(0), np.random.RandomState(0)
        self.trees_ = []
        for _ in range(self.n_estimators):
            tree_seed = seeds.randint(_MAX_INT)  # RandomForestClassifier's random_state of this tree
            split_rng.seed(tree_seed)
            boot_rng.seed(tree_seed)
            splitter = BestSplitter(Gini(1, n_classes), max_features, self.min_samples_leaf, 0.0, split_rng, None)
            picks = boot_rng.randint(0, n, n).astype(np.int32)  # the tree's bootstrap sample
            weight = np.ascontiguousarray(np.bincount(picks, minlength=n), dtype=np.float64)
            tree = Tree(n_features, n_classes, 1)
            DepthFirstTreeBuilder(splitter, min_split, self.min_samples_leaf, 0.0, _MAX_INT, 0.0).build(
                tree, X, Y, weight, None)
            self.trees_.append(tree)
        return self

    def tree_proba1(self, X: np.ndarray, trees=None) -> np.ndarray:
        """``[len(trees), len(X)]``: each tree's probability of class 1."""
        X = np.ascontiguousarray(X, dtype=np.float32)
        idx = range(len(self.trees_)) if trees is None else trees
        return np.array([self.trees_[int(i)].predict(X)[:, 1] for i in idx]).reshape(-1, len(X))

    def proba1(self, X: np.ndarray) -> np.ndarray:
        X = np.ascontiguousarray(X, dtype=np.float32)
        total = np.zeros((len(X), 2), dtype=np.float64)
        for tree in self.trees_:
            total += tree.predict(X)[:, :2]
        total /= len(self.trees_)
        return total[:, 1]


class SklearnChunk:
    """The same chunk as a ``RandomForestClassifier`` (the fallback, and the reference :class:`TreeChunk` is
    checked against)."""

    def __init__(self, n_estimators: int, seed: int, min_samples_leaf: int = 1, max_features="sqrt",
                 n_jobs: int | None = 1):
        self.model = RandomForestClassifier(n_estimators=n_estimators, n_jobs=n_jobs, min_samples_leaf=min_samples_leaf,
                                            max_features=max_features, random_state=seed)

    def fit(self, X: np.ndarray, y: np.ndarray) -> "SklearnChunk":
        self.model.fit(X, y)
        self._col = np.flatnonzero(self.model.classes_ == 1)
        return self

    def tree_proba1(self, X: np.ndarray, trees=None) -> np.ndarray:
        est = self.model.estimators_
        idx = range(len(est)) if trees is None else trees
        if not len(self._col):
            return np.zeros((len(idx), len(X)))
        return np.array([est[int(i)].predict_proba(X)[:, self._col[0]] for i in idx]).reshape(-1, len(X))

    def proba1(self, X: np.ndarray) -> np.ndarray:
        return self.model.predict_proba(X)[:, self._col[0]] if len(self._col) else np.zeros(len(X))


_FAST: bool | None = None


def fast_trees_available() -> bool:
    """Whether :class:`TreeChunk` builds the trees ``RandomForestClassifier`` builds with this scikit-learn
    (checked once per process on a small problem: equal probabilities, forest and per tree)."""
    global _FAST
    if _FAST is None:
        try:
            rng = np.random.default_rng(0)
            X, Xt = rng.random((40, 6)), rng.random((25, 6))
            y = (X[:, 0] + 0.3 * rng.random(40) > 0.6).astype(int)
            fast = TreeChunk(5, 3, 2, "sqrt").fit(X, y)
            ref = SklearnChunk(5, 3, 2, "sqrt").fit(X, y)
            _FAST = bool(np.array_equal(fast.proba1(Xt), ref.proba1(Xt))
                         and np.array_equal(fast.tree_proba1(Xt), ref.tree_proba1(Xt)))
        except Exception as exc:  # noqa: BLE001 - another scikit-learn's internals: its own forest is used
            log.debug("scikit-learn's tree builder is not usable directly (%s): RandomForestClassifier is used", exc)
            _FAST = False
        if not _FAST:
            log.info("RF+BORE's forest uses scikit-learn's RandomForestClassifier (the direct tree build does not "
                     "match it in this scikit-learn version): the same results, slower fits")
    return _FAST


class RollingForest:
    """``n_trees`` trees in chunks of ``trees_per_fit``; ``update`` refits the oldest chunk."""

    def __init__(self, n_trees: int = 200, trees_per_fit: int | None = None, n_jobs: int | None = 1,
                 min_samples_leaf: int = 1, max_features: str | float = "sqrt"):
        self.n_trees = int(n_trees)
        per = self.n_trees if not trees_per_fit or trees_per_fit >= self.n_trees else int(trees_per_fit)
        k = math.ceil(self.n_trees / per)
        self.chunk_sizes = [per] * (k - 1) + [self.n_trees - per * (k - 1)]
        self.n_jobs, self.min_samples_leaf, self.max_features = n_jobs, min_samples_leaf, max_features
        self.reset()

    def reset(self) -> None:
        self._chunks: list[TreeChunk | SklearnChunk | None] = [None] * len(self.chunk_sizes)
        self._data: list[tuple | None] = [None] * len(self.chunk_sizes)
        self._next = 0  # the oldest chunk, refit by the next update

    @property
    def fitted(self) -> bool:
        return all(m is not None for m in self._chunks)

    def _fit_chunk(self, i: int, X: np.ndarray, y: np.ndarray, seed: int) -> None:
        args = (self.chunk_sizes[i], seed, self.min_samples_leaf, self.max_features)
        chunk = None
        if self.n_jobs in (None, 1) and fast_trees_available():
            try:
                chunk = TreeChunk(*args).fit(X, y)
            except ValueError:  # labels other than 0 and 1, or non-finite features: scikit-learn's forest
                chunk = None
        if chunk is None:  # also when threads are asked for
            chunk = SklearnChunk(*args, n_jobs=self.n_jobs).fit(X, y)
        self._chunks[i], self._data[i] = chunk, (X, y, seed)

    def update(self, X: np.ndarray, y: np.ndarray, seed: int) -> None:
        """Fit on ``(X, y)`` (``y`` in {0, 1} with both classes present): every chunk at the first
        call, then the oldest chunk only. ``seed`` fixes the trees (chunk ``i`` of the first fit
        uses ``seed + i``)."""
        if not self.fitted:
            for i in range(len(self._chunks)):
                self._fit_chunk(i, X, y, seed + i)
            self._next = 0
            return
        self._fit_chunk(self._next, X, y, seed)
        self._next = (self._next + 1) % len(self._chunks)

    def tree_proba(self, X: np.ndarray, trees: np.ndarray | None = None) -> np.ndarray:
        """``[n_trees, len(X)]``: each tree's predicted probability of class 1 (``trees``: only those tree
        indices, in that order)."""
        starts = np.cumsum([0] + self.chunk_sizes[:-1])
        if trees is None:
            return np.concatenate([c.tree_proba1(X) for c in self._chunks]).reshape(-1, len(X))
        trees = np.asarray(trees, dtype=int)
        chunk_of = np.searchsorted(starts, trees, side="right") - 1
        out = np.empty((len(trees), len(X)))
        for c in np.unique(chunk_of):
            rows = np.flatnonzero(chunk_of == c)
            out[rows] = self._chunks[c].tree_proba1(X, trees[rows] - starts[c])
        return out

    def predict(self, X: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Mean over all trees of the predicted probability of class 1; with ``weights`` (one per
        tree, summing to 1) the weighted mean instead (a Thompson-style draw over the ensemble: only
        the trees of non-zero weight are evaluated)."""
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64)
            used = np.flatnonzero(w)
            return w[used] @ self.tree_proba(X, used)
        total = np.zeros(len(X))
        for chunk, size in zip(self._chunks, self.chunk_sizes):
            total += size * chunk.proba1(X)
        return total / self.n_trees

    def get_state(self) -> dict:
        """Training data and seed of every chunk (the trees are rebuilt from them on restore)."""
        return {"data": list(self._data), "next": self._next}

    def set_state(self, state: dict) -> None:
        self.reset()
        data = state["data"]
        if len(data) != len(self._chunks):
            raise ValueError("forest state has a different number of chunks")
        for i, d in enumerate(data):
            if d is not None:
                self._fit_chunk(i, *d)
        self._next = state["next"]
