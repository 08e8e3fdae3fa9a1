"""The random-forest classifier of RF+BORE, refreshed a slice at a time.

Fitting ~200 scikit-learn trees costs about 1-2 ms per tree on a small CPU (mostly per-tree
overhead), i.e. 0.2-0.4 s per suggestion when the whole forest is refit after every trial. The
forest here is kept as ``ceil(n_trees / trees_per_fit)`` chunks, each a
``sklearn.ensemble.RandomForestClassifier``: the first fit builds all of them, and every later
update (only when the training data changed) refits just the oldest chunk on the current data.
The prediction averages all trees, so the ensemble keeps ``n_trees`` trees while an update costs
``trees_per_fit`` trees; each tree lags at most ``n_chunks - 1`` updates behind.
``trees_per_fit=None`` (or >= ``n_trees``) refits the whole forest every time.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.ensemble import RandomForestClassifier


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
        self._models: list[RandomForestClassifier | None] = [None] * len(self.chunk_sizes)
        self._data: list[tuple | None] = [None] * len(self.chunk_sizes)
        self._next = 0  # the oldest chunk, refit by the next update

    @property
    def fitted(self) -> bool:
        return all(m is not None for m in self._models)

    def _fit_chunk(self, i: int, X: np.ndarray, y: np.ndarray, seed: int) -> None:
        model = RandomForestClassifier(n_estimators=self.chunk_sizes[i], n_jobs=self.n_jobs,
                                       min_samples_leaf=self.min_samples_leaf,
                                       max_features=self.max_features, random_state=seed)
        model.fit(X, y)
        self._models[i], self._data[i] = model, (X, y, seed)

    def update(self, X: np.ndarray, y: np.ndarray, seed: int) -> None:
        """Fit on ``(X, y)`` (``y`` in {0, 1} with both classes present): every chunk at the first
        call, then the oldest chunk only. ``seed`` fixes the trees (chunk ``i`` of the first fit
        uses ``seed + i``)."""
        if not self.fitted:
            for i in range(len(self._models)):
                self._fit_chunk(i, X, y, seed + i)
            self._next = 0
            return
        self._fit_chunk(self._next, X, y, seed)
        self._next = (self._next + 1) % len(self._models)

    def tree_proba(self, X: np.ndarray, trees: np.ndarray | None = None) -> np.ndarray:
        """``[n_trees, len(X)]``: each tree's predicted probability of class 1 (``trees``: only those tree
        indices, in that order)."""
        flat = [(tree, np.flatnonzero(model.classes_ == 1)) for model in self._models for tree in model.estimators_]
        out = []
        for i in (range(len(flat)) if trees is None else trees):
            tree, col = flat[int(i)]
            out.append(tree.predict_proba(X)[:, col[0]] if len(col) else np.zeros(len(X)))
        return np.array(out).reshape(-1, len(X))

    def predict(self, X: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Mean over all trees of the predicted probability of class 1; with ``weights`` (one per
        tree, summing to 1) the weighted mean instead (a Thompson-style draw over the ensemble: only
        the trees of non-zero weight are evaluated)."""
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64)
            used = np.flatnonzero(w)
            return w[used] @ self.tree_proba(X, used)
        total = np.zeros(len(X))
        for model, size in zip(self._models, self.chunk_sizes):
            proba = model.predict_proba(X)
            col = np.flatnonzero(model.classes_ == 1)
            total += size * (proba[:, col[0]] if len(col) else 0.0)
        return total / self.n_trees

    def get_state(self) -> dict:
        """Training data and seed of every chunk (the trees are rebuilt from them on restore)."""
        return {"data": list(self._data), "next": self._next}

    def set_state(self, state: dict) -> None:
        self.reset()
        data = state["data"]
        if len(data) != len(self._models):
            raise ValueError("forest state has a different number of chunks")
        for i, d in enumerate(data):
            if d is not None:
                self._fit_chunk(i, *d)
        self._next = state["next"]
