"""``SpaceSearcher``: the Ray Tune ``Searcher`` plumbing shared by kgtuner's searchers.

It holds the space (a kgtuner ``SearchSpace``, or one converted from a Ray ``param_space`` given
through ``set_search_properties``), the finished observations, the pending trials, the random
state, the concurrency limit and the optional finite candidate set, and saves/restores all of it.
Subclasses only decide *which* configuration to propose next.

Four kinds of finished trial are kept apart: fully-trained trials (their metric), failures (metric
NaN: errored, or no finite metric), *low-fidelity* trials that an early-stopping scheduler (ASHA)
stopped at a rung -- passed as ``on_trial_complete(trial_id, result)`` with
``result[EARLY_STOPPED] = True`` (and ``result[EARLY_STOP_RUNG]``), or ``add_evaluated_point(...,
pruned=True)`` -- and *cut* trials, stopped at a stage's deadline (``result["status"] == "stopped"``,
the trainable's and the replay's status for it). A low-fidelity trial's partial metric is not stored
(it is not comparable with finished trials); its rung is. A cut trial's metric is stored and flagged:
it is a lower bound of what the trial would have reached. Subclasses decide how to learn from them
(RF+BORE: a low-fidelity trial is class 0; a cut one is class 1 only when its lower bound already
reaches the class-1 threshold of the fully-trained trials, else it is treated as low-fidelity).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from ray.tune.search import Searcher

from kgtuner.errors import ConfigError
from kgtuner.search.candidates import first_novel
from kgtuner.search.ray_space import has_domains, space_from_ray
from kgtuner.search import state as state_io
from kgtuner.search.space import SearchSpace
from kgtuner.validation import number

_STATE_VERSION = 2  # 2: JSON data (kgtuner.search.state), the space by its names
#: Result keys that mark a trial stopped early by a scheduler (a low-fidelity observation).
EARLY_STOPPED = "early_stopped"
EARLY_STOP_RUNG = "early_stop_rung"
#: Metric used when neither the constructor nor Ray's ``set_search_properties`` names one. It is
#: not reported as ``searcher.metric`` (Ray's ConcurrencyLimiter copies that at construction and
#: would then insist on it even when the Tuner's metric differs).
DEFAULT_METRIC = "valid_mrr"
#: ``result["status"]`` of a trial stopped at its stage's deadline (kgtuner's trainable and the replay), and
#: the ``rung`` that marks such a prior observation (``(config, value, CUT)``): its value is a lower bound.
CUT_STATUS = "stopped"
CUT = "cut"


def _as_space(space: Any) -> SearchSpace | None:
    if space is None or isinstance(space, SearchSpace):
        return space
    if isinstance(space, (str, Path)):
        from kgtuner.search.loading import load_space

        return load_space(space)
    if isinstance(space, Mapping):
        if has_domains(space):
            return space_from_ray(space)
        from kgtuner.search.loading import load_space

        return load_space(space)
    raise ConfigError(f"space must be a SearchSpace, a space name/path or a Ray param_space, got {type(space).__name__}")


class DataStateSearcher(Searcher):
    """A ``Searcher`` whose experiment checkpoint is its ``get_state()`` written as JSON data.

    Ray names the file ``searcher-state-<session>.pkl``; kgtuner writes JSON into it
    (:mod:`kgtuner.search.state`) and reads it with ``json`` only, so a crafted file in a run
    directory is refused (a pickle is named as such), never executed. Subclasses define
    ``get_state``/``set_state`` over plain data, so a restored experiment (``Tuner.restore``)
    continues exactly where it stopped."""

    def save(self, checkpoint_path: str) -> None:
        state_io.dump(checkpoint_path, "searcher", self.get_state())

    def restore(self, checkpoint_path: str) -> None:
        self.set_state(state_io.load(checkpoint_path, "searcher"))


class SpaceSearcher(DataStateSearcher):
    """Base class. ``candidates`` switches to finite-candidate mode (each proposed once, then
    ``Searcher.FINISHED``, or proposals over the space when ``exhausted == "explore"``); ``min_distance`` is the near-duplicate tolerance (fraction of each
    continuous range, log scale for log parameters); ``max_concurrent`` caps pending trials
    (``suggest`` returns ``None`` at the cap). ``metric=None`` means Ray's metric if it gives one,
    else ``valid_mrr``."""

    #: What follows the last candidate: ``"finish"`` (Searcher.FINISHED) or ``"explore"`` (the space).
    exhausted = "finish"

    def __init__(self, space: Any = None, metric: str | None = None, mode: str | None = "max",
                 seed: int = 0, candidates: Sequence[Mapping[str, Any]] | None = None,
                 max_concurrent: int | None = None, min_distance: float = 0.01,
                 points_to_evaluate: Sequence[Mapping[str, Any]] | None = None):
        if mode not in (None, "min", "max"):
            raise ConfigError(f"mode must be 'min' or 'max', got {mode!r}")
        max_concurrent = number("max_concurrent", max_concurrent, integer=True, minimum=1, allow_none=True)
        min_distance = number("min_distance", min_distance, minimum=0, maximum=1, high_open=True)
        super().__init__(metric=metric, mode=mode)
        self._space = _as_space(space)
        self._nested = self._space is not None and any("/" in n for n in self._space.names)
        self.seed = number("seed", seed, integer=True)
        self.max_concurrent = max_concurrent
        self.min_distance = min_distance
        self._candidate_cfgs: list[dict] | None = None
        if candidates is not None:
            self._set_candidates(candidates)
        self._points: list[dict] = []
        if points_to_evaluate:
            if self._space is None:
                raise ConfigError("points_to_evaluate needs the searcher's space")
            self._points = [self._space.check_config(p, f"search.points_to_evaluate[{i}]")
                            for i, p in enumerate(points_to_evaluate)]
        self._reset_history()

    # -- state -------------------------------------------------------------------------------
    def _reset_history(self) -> None:
        self._rng = np.random.default_rng(self.seed)
        self._obs_rows: list[np.ndarray] = []
        self._obs_cfgs: list[dict] = []
        self._obs_scores: list[float] = []  # higher is better; NaN = failed / errored / low-fidelity
        self._obs_rungs: list[int | None] = []  # None = fully trained (or failed); int = stopped early at this rung
        self._obs_cut: list[bool] = []  # stopped at a stage deadline: the score is a lower bound
        self._pending: dict[str, tuple[np.ndarray, dict, int]] = {}
        self._n_suggested = 0
        self._points_done = 0  # points_to_evaluate suggested so far (they come first)
        if self._candidate_cfgs is not None:
            self._used = np.zeros(len(self._candidate_cfgs), dtype=bool)

    def _set_candidates(self, candidates: Sequence[Mapping[str, Any]]) -> None:
        cfgs = [dict(c) for c in candidates]
        if not cfgs:
            raise ConfigError("candidates: the candidate set is empty")
        if self._space is None:
            self._space = SearchSpace.from_configs(cfgs)
        self._candidate_cfgs = cfgs
        self._cand_rows = self._space.to_array(cfgs)
        self._used = np.zeros(len(cfgs), dtype=bool)

    @property
    def space(self) -> SearchSpace | None:
        return self._space

    @property
    def candidates_left(self) -> int | None:
        """Candidates not yet proposed (finite-candidate mode), else None."""
        return None if self._candidate_cfgs is None else int((~self._used).sum())

    @property
    def n_observations(self) -> int:
        """Finished trials recorded, low-fidelity (early-stopped) ones included."""
        return len(self._obs_scores)

    def _low_mask(self) -> np.ndarray:
        """True for the low-fidelity (early-stopped) observations."""
        return np.array([r is not None for r in self._obs_rungs], dtype=bool)

    def _cut_mask(self) -> np.ndarray:
        """True for the observations cut at a stage deadline (their score is a lower bound)."""
        return np.array(self._obs_cut, dtype=bool).reshape(len(self._obs_scores))

    @property
    def pending_trials(self) -> list[str]:
        return list(self._pending)

    def observations(self) -> list[tuple[dict, float | None]]:
        """(config, metric value) of every fully-trained or failed trial in order; ``None`` for failed
        trials. Early-stopped trials are in :meth:`early_stopped_observations`, trials cut at a deadline in
        :meth:`cut_observations`."""
        sign = 1.0 if self._mode != "min" else -1.0
        return [(dict(c), None if math.isnan(s) else sign * s)
                for c, s, r, cut in zip(self._obs_cfgs, self._obs_scores, self._obs_rungs, self._obs_cut)
                if r is None and not cut]

    def cut_observations(self) -> list[tuple[dict, float]]:
        """(config, metric value so far) of every trial cut at a stage deadline, in order."""
        sign = 1.0 if self._mode != "min" else -1.0
        return [(dict(c), sign * s) for c, s, cut in zip(self._obs_cfgs, self._obs_scores, self._obs_cut) if cut]

    def early_stopped_observations(self) -> list[tuple[dict, int]]:
        """(config, rung) of every trial stopped early by a scheduler (low-fidelity), in order."""
        return [(dict(c), int(r)) for c, r in zip(self._obs_cfgs, self._obs_rungs) if r is not None]

    def get_state(self) -> dict:
        return {
            "version": _STATE_VERSION,
            "class": type(self).__name__,
            "metric": self._metric, "mode": self._mode, "seed": self.seed,
            # the space is the constructor's (or Ray's param_space): kept by its parameter names and checked
            "space": None if self._space is None else list(self._space.names), "nested": self._nested,
            "max_concurrent": self.max_concurrent, "min_distance": self.min_distance,
            "rng": self._rng.bit_generator.state,
            "obs_rows": [r.copy() for r in self._obs_rows], "obs_cfgs": [dict(c) for c in self._obs_cfgs],
            "obs_scores": list(self._obs_scores), "obs_rungs": list(self._obs_rungs), "obs_cut": list(self._obs_cut),
            "pending": {k: (v[0].copy(), dict(v[1]), int(v[2])) for k, v in self._pending.items()},
            "n_suggested": self._n_suggested,
            "points": [dict(p) for p in self._points], "points_done": self._points_done,
            "candidates": self._candidate_cfgs,
            "used": None if self._candidate_cfgs is None else self._used.copy(),
        }

    def set_state(self, state: dict) -> None:
        if state.get("class") != type(self).__name__:
            raise ConfigError(f"searcher state was saved by {state.get('class')}, not {type(self).__name__}")
        if state.get("version") != _STATE_VERSION:
            raise ConfigError(f"searcher state of version {state.get('version')!r}, expected {_STATE_VERSION}")
        names = state["space"]
        if names is not None and (self._space is None or list(self._space.names) != list(names)):
            have = None if self._space is None else list(self._space.names)
            raise ConfigError(f"{type(self).__name__}: the saved state is over the parameters {names}, this "
                              f"searcher's space has {have}; resume with the same space")
        self._metric, self._mode, self.seed = state["metric"], state["mode"], state["seed"]
        self._nested = state["nested"]
        self.max_concurrent, self.min_distance = state["max_concurrent"], state["min_distance"]
        self._candidate_cfgs = state["candidates"]
        if self._candidate_cfgs is not None:
            self._cand_rows = self._space.to_array(self._candidate_cfgs)
        self._reset_history()
        self._rng.bit_generator.state = state["rng"]
        self._obs_rows = [np.asarray(r, dtype=np.float64).copy() for r in state["obs_rows"]]
        self._obs_cfgs = [dict(c) for c in state["obs_cfgs"]]
        self._obs_scores = list(state["obs_scores"])
        self._obs_rungs = list(state.get("obs_rungs") or [None] * len(self._obs_scores))  # absent before ASHA
        self._obs_cut = [bool(c) for c in state.get("obs_cut") or [False] * len(self._obs_scores)]  # absent before 37
        self._pending = {k: (np.asarray(v[0], dtype=np.float64).copy(), dict(v[1]), int(v[2]))
                         for k, v in state["pending"].items()}
        self._n_suggested = state["n_suggested"]
        self._points = [dict(p) for p in state.get("points") or []]
        self._points_done = int(state.get("points_done") or 0)
        if self._candidate_cfgs is not None:
            self._used = np.asarray(state["used"], dtype=bool).copy()

    # -- Ray Tune Searcher API ---------------------------------------------------------------
    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec) -> bool:
        """Accept Ray's metric/mode (a ``None`` is ignored) and, when this searcher has no space
        yet, the Domains of Ray's ``param_space``. Returns False only when a space was already set
        and ``param_space`` holds Domains too (Ray then explains the conflict)."""
        if has_domains(config):
            if self._space is not None:
                return False
            self._space = space_from_ray(config)
            self._nested = True
            self._reset_history()
        if metric:
            self._metric = metric
        if mode:
            if mode not in ("min", "max"):
                raise ConfigError(f"mode must be 'min' or 'max', got {mode!r}")
            self._mode = mode
        return True

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        """Handle the concurrency cap here (so pending trials are known): always True."""
        self.max_concurrent = int(max_concurrent)
        return True

    def suggest(self, trial_id: str):
        if self._space is None:
            raise RuntimeError(f"{type(self).__name__} has no search space: pass `space=` or a Tuner "
                               "param_space with tune.uniform/choice/... domains")
        if self._mode is None:
            raise RuntimeError(f"{type(self).__name__} needs a mode ('min' or 'max')")
        if self.max_concurrent is not None and len(self._pending) >= self.max_concurrent:
            return None
        remaining = None if self._candidate_cfgs is None else np.flatnonzero(~self._used)
        if self._points_done < len(self._points):  # known configurations first (Ray Tune's points_to_evaluate)
            cfg = dict(self._points[self._points_done])
            self._points_done += 1
            row, index = self._space.to_array([cfg])[0], self._mark_candidate(cfg)
            self._pending[trial_id] = (row, cfg, index)
            self._n_suggested += 1
            return self._output(cfg)
        if remaining is not None and len(remaining) == 0 and self.exhausted != "explore":
            return Searcher.FINISHED
        if remaining is not None and len(remaining):
            index = int(self._propose_index(remaining))
            self._used[index] = True
            row, cfg = self._cand_rows[index], dict(self._candidate_cfgs[index])
        else:  # the space (also once the candidates are exhausted, with ``exhausted="explore"``)
            index = -1
            row = self._propose_row()
            cfg = self._space.to_config(row)
        self._pending[trial_id] = (row, cfg, index)
        self._n_suggested += 1
        return self._output(cfg)

    def _output(self, cfg: dict) -> dict:
        if not self._nested:
            return dict(cfg)
        from ray.tune.utils.util import unflatten_dict

        return unflatten_dict(dict(cfg))

    @property
    def effective_metric(self) -> str:
        """The metric read from results: the given one, else ``valid_mrr``."""
        return self._metric or DEFAULT_METRIC

    def _score(self, result: Mapping | None, error: bool) -> float:
        metric = self.effective_metric
        if error or not result or metric not in result:
            return math.nan
        try:
            v = float(result[metric])
        except (TypeError, ValueError):
            return math.nan
        if not math.isfinite(v):
            return math.nan
        return v if self._mode != "min" else -v

    def _record(self, row: np.ndarray, cfg: dict, score: float, rung: int | None = None, cut: bool = False) -> None:
        self._obs_rows.append(np.asarray(row, dtype=np.float64))
        self._obs_cfgs.append(dict(cfg))
        self._obs_scores.append(math.nan if rung is not None else score)
        self._obs_rungs.append(None if rung is None else int(rung))
        self._obs_cut.append(bool(cut) and rung is None and not math.isnan(score))

    @staticmethod
    def _was_cut(result: Mapping | None, error: bool) -> bool:
        """A result of a trial stopped at its stage's deadline (not by a scheduler, not failed)."""
        return (not error and bool(result) and result.get("status") == CUT_STATUS
                and not result.get(EARLY_STOPPED))

    @staticmethod
    def _early_rung(result: Mapping | None, error: bool) -> int | None:
        """The rung of an early-stopped (low-fidelity) result, else None (0 when the rung is unknown)."""
        if error or not result or not result.get(EARLY_STOPPED):
            return None
        rung = result.get(EARLY_STOP_RUNG)
        return int(rung) if isinstance(rung, (int, float)) and math.isfinite(rung) else 0

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """Record a finished trial; an errored trial, or one without a finite metric, is recorded
        as a failure (the worst class for RF+BORE); a result with ``EARLY_STOPPED`` true is a
        low-fidelity observation (its metric is not used)."""
        entry = self._pending.pop(trial_id, None)
        if entry is None:
            return  # not ours (e.g. a trial restored by Ray after this searcher's checkpoint)
        self._record(entry[0], entry[1], self._score(result, error), rung=self._early_rung(result, error),
                     cut=self._was_cut(result, error))

    def add_evaluated_point(self, parameters: dict, value: float, error: bool = False, pruned: bool = False,
                            intermediate_values: list | None = None, cut: bool = False) -> None:
        """Record a configuration evaluated elsewhere (warm start); flat or nested keys.
        ``pruned=True``: it was stopped early (low-fidelity; ``value`` is not used); ``cut=True``: it was
        stopped at a stage deadline (``value`` is a lower bound)."""
        from ray.tune.utils.util import flatten_dict

        cfg = flatten_dict(dict(parameters), delimiter="/") if self._nested else dict(parameters)
        row = self._space.to_array([cfg])[0]
        score = self._score({self.effective_metric: value}, error)
        self._record(row, cfg, score, rung=0 if pruned and not error else None, cut=cut and not error)
        self._mark_candidate(cfg)

    def _mark_candidate(self, cfg: Mapping[str, Any]) -> int:
        """Finite-candidate mode: mark every candidate equal to ``cfg`` as used; the first one's index, else -1."""
        if self._candidate_cfgs is None:
            return -1
        same = [i for i, c in enumerate(self._candidate_cfgs) if c == dict(cfg)]
        self._used[same] = True
        return same[0] if same else -1

    # -- proposals ---------------------------------------------------------------------------
    def _taken_rows(self, include_pending: bool = True) -> np.ndarray:
        rows = list(self._obs_rows)
        if include_pending:
            rows += [v[0] for v in self._pending.values()]
        return np.array(rows) if rows else np.empty((0, len(self._space)))

    def _random_row(self, include_pending: bool = True) -> np.ndarray:
        cand = self._space.sample_array(self._rng, 64)
        i = first_novel(self._space, cand, np.arange(len(cand)), self._taken_rows(include_pending),
                        self.min_distance)
        return cand[0 if i is None else i]

    def _propose_row(self) -> np.ndarray:
        raise NotImplementedError

    def _propose_index(self, remaining: np.ndarray) -> int:
        raise NotImplementedError


class RandomSearcher(SpaceSearcher):
    """Random search over a kgtuner space (conditions and exclusions honoured, no near-duplicates
    of finished or pending trials), seeded and resumable; the ``random`` baseline."""

    def _propose_row(self) -> np.ndarray:
        return self._random_row()

    def _propose_index(self, remaining: np.ndarray) -> int:
        return int(self._rng.choice(remaining))
