"""Candidate generation for RF+BORE and the (near-)duplicate test, on internal arrays.

``evolve`` is the reference KGTuner code's candidate scheme: offspring of the best configurations
are 20 % fresh random samples, 40 % one/two-parameter mutations and 40 % uniform crossovers.
"""

from __future__ import annotations

import numpy as np

from kgtuner.search.space import SearchSpace

#: Shares of fresh random samples, mutations and crossovers among ``evolve``'s offspring (reference code).
EVOLVE_SHARES = (0.2, 0.4, 0.4)


def evolve(space: SearchSpace, rng: np.random.Generator, parents: np.ndarray, n: int,
           scale: float = 0.1, shares: tuple[float, float, float] = EVOLVE_SHARES) -> np.ndarray:
    """About ``n`` offspring of ``parents``: fresh samples, mutations and crossovers in ``shares``."""
    n_random = int(round(n * shares[0]))
    n_mut = int(round(n * shares[1]))
    n_cross = max(0, n - n_random - n_mut)
    parts = [space.sample_array(rng, n_random)] if n_random else []
    if len(parents):
        parts += [space.mutate_array(rng, parents, n_mut, scale), space.crossover_array(rng, parents, n_cross)]
    else:
        parts.append(space.sample_array(rng, n_mut + n_cross))
    parts = [p for p in parts if len(p)]
    return np.vstack(parts) if parts else np.empty((0, len(space)))


def near_duplicates(space: SearchSpace, cand: np.ndarray, taken: np.ndarray, tol: float) -> np.ndarray:
    """Mask of the rows of ``cand`` that equal a row of ``taken`` on every choice and activity and lie
    within ``tol`` (unit scale, i.e. a fraction of each range) on every continuous parameter."""
    if len(taken) == 0 or len(cand) == 0:
        return np.zeros(len(cand), dtype=bool)
    a, b = cand[:, None, :], taken[None, :, :]
    both_nan = np.isnan(a) & np.isnan(b)
    with np.errstate(invalid="ignore"):
        close = np.where(space.continuous_mask, np.abs(a - b) <= tol, a == b)
    return (close | both_nan).all(axis=2).any(axis=1)


def first_novel(space: SearchSpace, cand: np.ndarray, order: np.ndarray, taken: np.ndarray, tol: float,
                chunk: int = 64) -> int | None:
    """Index (into ``cand``) of the first candidate in ``order`` that is no near-duplicate of
    ``taken`` nor of itself-earlier picks; checks ``chunk`` candidates at a time."""
    for start in range(0, len(order), chunk):
        idx = order[start:start + chunk]
        dup = near_duplicates(space, cand[idx], taken, tol)
        if not dup.all():
            return int(idx[np.argmin(dup)])
    return None
