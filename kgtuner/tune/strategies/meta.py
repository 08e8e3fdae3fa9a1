"""``MetaSearcher``: the plumbing every strategy's searcher shares, written once.

A strategy's searcher runs inside the coordinator's one Tune run and decides which configuration of
which stage starts next; it wraps one or more inner searchers (kgtuner.search: RF+BORE, random,
TPE). What is common lives here:

* the running set, each trial with its stage, and a per-stage concurrency cap (trials of a stage
  that has ended and are still stopping do not count against the next stage; ``stage_limits`` gives a
  stage its own cap, e.g. KGTuner's packed stage 1): :meth:`_slot_free`;
* the global ``trial_index`` and the meta keys of a suggestion (:meth:`_start`);
* the budget clock of the live driver (:meth:`_elapsed`, via :mod:`kgtuner.tune.events`);
* failure scoring: a result is read as a :class:`~kgtuner.tune.report.TrialReport`, a failure (error,
  ``trial_status=failed`` or no finite metric) scores None; the best value a running trial reported so
  far is kept in ``latest``; an early stop by the scheduler is looked up once, at completion;
* the FINISHED handshake: :meth:`_finish` tells the driver (``SearchFinished``) and answers FINISHED
  from then on;
* state: ``get_state``/``set_state`` save and restore the whole ``__dict__`` as data
  (:mod:`kgtuner.search.state`: JSON, read back without running code), so no field can be forgotten:
  a field of a type the encoder does not know fails the save loudly. Inner searchers are saved by their
  own ``get_state`` and restored into the live ones (a searcher built during the search, e.g. KGTuner's
  stage-2 forest, is rebuilt by :meth:`_rebuild`); fields named in ``REBUILT`` (factories: callables)
  are the constructor's and are not saved.

* a larger budget on resume (:meth:`extend_budget`): the restored searcher takes the strategy's budget
  fields under the new budget and suggests again;
* trials that finished after the saved state (a resume after a crash keeps their rows):
  :meth:`adopt_finished` completes a trial the restored searcher knew as running, and records one it never
  suggested (``trial_index``, the subclass's counts via :meth:`_adopt`, the inner searcher through
  ``add_evaluated_point``: :func:`add_evaluated`); the driver is told when Tune restored the searcher
  (``on_searcher_restored``).

Subclasses implement :meth:`_next` (the next suggestion, None or FINISHED) and may override
:meth:`_on_result`, :meth:`_on_complete` and :meth:`_adopt`.
"""

from __future__ import annotations

import math
from typing import Any

from ray.tune.search import Searcher

from kgtuner.search import state as state_io
from kgtuner.search.base import DataStateSearcher, SpaceSearcher
from kgtuner.tune import events
from kgtuner.tune.report import METRIC, MODE, TrialReport


class MetaSearcher(DataStateSearcher):
    """Base class of the strategies' searchers (see the module docstring)."""

    #: Fields set by the constructor that are code, not data (factories): kept from the live searcher
    #: on restore, never saved. Every other field is saved.
    REBUILT: tuple[str, ...] = ()

    def __init__(self, *, max_concurrent: int | None = None, metric: str = METRIC, mode: str = MODE,
                 stage_limits: dict[int, int] | None = None):
        super().__init__(metric=metric, mode=mode)
        self.max_concurrent = None if max_concurrent is None else int(max_concurrent)
        # stage -> its own concurrency cap (e.g. k trials per GPU in KGTuner's stage 1); other stages: max_concurrent
        self.stage_limits: dict[int, int] = {int(k): int(v) for k, v in (stage_limits or {}).items()}
        self.done = False
        self.index = 0                          # trial_index of the next suggestion
        self.trial_stage: dict[str, int] = {}  # every trial suggested -> its stage
        self.configs: dict[str, dict] = {}     # every trial suggested -> its hyper-parameters
        self.running: set[str] = set()
        self.latest: dict[str, float] = {}     # running trial -> best metric reported so far

    # ---- shared helpers --------------------------------------------------------------------
    @staticmethod
    def _elapsed() -> float:
        return events.elapsed()

    def _running(self, stage: int) -> list[str]:
        """Running trials of ``stage``, sorted."""
        return sorted(t for t in self.running if self.trial_stage.get(t) == stage)

    def _slot_free(self, stage: int) -> bool:
        """True when fewer than ``stage_limits[stage]`` (default ``max_concurrent``) trials of ``stage`` run."""
        limits = getattr(self, "stage_limits", None) or {}  # a searcher pickled before stage_limits lacks it
        limit = limits.get(int(stage), self.max_concurrent)
        return limit is None or len(self._running(stage)) < limit

    def _start(self, trial_id: str, stage: int, config: dict) -> dict:
        """Record ``trial_id`` as a running trial of ``stage``; the suggestion with its meta keys."""
        config = dict(config)
        self.trial_stage[trial_id] = int(stage)
        self.configs[trial_id] = config
        self.running.add(trial_id)
        out = {**config, "stage": int(stage), "trial_index": self.index}
        self.index += 1
        return out

    def _finish(self) -> str:
        self.done = True
        events.notify(events.SearchFinished())
        return Searcher.FINISHED

    # ---- hooks -----------------------------------------------------------------------------
    def _next(self, trial_id: str):
        """The next suggestion (via :meth:`_start`), None (nothing now) or ``Searcher.FINISHED``."""
        raise NotImplementedError

    def _on_result(self, trial_id: str, result: dict, report: TrialReport) -> None:
        """An intermediate result of a known trial (``latest`` is updated already)."""

    def _on_complete(self, trial_id: str, result: dict | None, score: float | None,
                     early: events.TrialEarlyStopped | None) -> None:
        """``trial_id`` ended: ``score`` None for a failure; ``early`` when the scheduler stopped it at a rung."""

    # ---- Searcher API ----------------------------------------------------------------------
    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        # The inner searchers were built with their spaces, metric and mode; Tune's (empty)
        # param_space must not replace them.
        return True

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        self.max_concurrent = int(max_concurrent)
        return True

    def suggest(self, trial_id: str):
        if self.done:
            return Searcher.FINISHED
        return self._next(trial_id)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id not in self.trial_stage:
            return
        report = TrialReport.from_dict(result)
        value = report.score()
        if value is not None and trial_id in self.running:
            self.latest[trial_id] = max(value, self.latest.get(trial_id, -math.inf))
        self._on_result(trial_id, result, report)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id not in self.trial_stage:
            return
        self.running.discard(trial_id)
        self.latest.pop(trial_id, None)
        score = None if error or result is None else TrialReport.from_dict(result).score()
        early = events.early_stop_of(trial_id) if score is not None else None
        self._on_complete(trial_id, result, score, early)

    # ---- trials that finished after the saved state ----------------------------------------
    def adopt_finished(self, trial_id: str, stage: int, config: dict, trial_index: int | None,
                       result: dict | None, error: bool = False) -> bool:
        """A trial that finished after this searcher's state was saved (the driver died before Tune saved
        again; its row is in trials.parquet): take its result now, as if it had just completed, so that the
        restored search neither runs it again nor forgets it. A trial this searcher suggested (running when
        the state was saved) completes through :meth:`on_trial_complete`; one suggested after the save is
        recorded as suggested -- its ``trial_index`` is never handed out again, it counts against a trial
        budget -- and passed to :meth:`_adopt`. Returns False when the searcher cannot take it (the driver
        then drops its row and the search runs another trial instead)."""
        if trial_id in self.trial_stage:
            if trial_id in self.running:
                self.on_trial_complete(trial_id, result=None if error else result, error=error)
            return True
        score = None if error or result is None else TrialReport.from_dict(result).score()
        early = events.early_stop_of(trial_id) if score is not None else None
        cut = score is not None and early is None and SpaceSearcher._was_cut(result, error)
        self.trial_stage[trial_id] = int(stage)
        self.configs[trial_id] = dict(config)
        try:
            adopted = self._adopt(trial_id, int(stage), dict(config), score, early, trial_index, cut=cut)
        except Exception:  # noqa: BLE001 - e.g. an inner searcher without add_evaluated_point
            adopted = False
        if not adopted:
            del self.trial_stage[trial_id], self.configs[trial_id]
            return False
        if trial_index is not None:
            self.index = max(self.index, int(trial_index) + 1)
        return True

    def _adopt(self, trial_id: str, stage: int, config: dict, score: float | None,
               early: events.TrialEarlyStopped | None, trial_index: int | None, cut: bool = False) -> bool:
        """Record a finished trial this searcher never suggested (see :meth:`adopt_finished`; ``trial_stage``
        and ``configs`` hold it already): count it as suggested, tell the inner searcher
        (:func:`add_evaluated`; ``cut``: it was stopped at its stage's deadline). Returns False when the
        strategy cannot (the default)."""
        return False

    # ---- a larger budget on resume ------------------------------------------------------------
    def extend_budget(self, fields: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
        """A resume gave the search a larger budget: set the budget ``fields`` (the strategy's
        ``searcher_budget()``: the constructor's arguments under the new budget) on this restored searcher,
        which saved the old ones, and let it suggest again if it had answered FINISHED (when a field
        changed). Returns the fields
        that changed, ``name -> (old, new)``; a field this searcher does not have is a ValueError."""
        changed = {}
        for name, value in fields.items():
            if name not in self.__dict__:
                raise ValueError(f"{type(self).__name__} has no budget field {name!r}")
            old = self.__dict__[name]
            if old != value:
                changed[name] = (old, value)
                setattr(self, name, value)
        if changed:
            self.done = False  # FINISHED was the old budget's answer; the next suggestion decides under the new one
        return changed

    # ---- state -----------------------------------------------------------------------------
    def restore(self, checkpoint_path: str) -> None:
        """Tune's resume. A state file that is not kgtuner's JSON (a pickle, a foreign or damaged file) is
        refused: Tune would log the error and start the experiment afresh, so the search also ends here
        (``SearchFailed`` with the reason; every later suggestion is FINISHED)."""
        try:
            super().restore(checkpoint_path)
        except state_io.StateError as exc:
            self.done = True
            events.notify(events.SearchFailed(f"cannot resume the search: {exc}"))
            raise
        hook = getattr(events.active(), "on_searcher_restored", None)  # trials that finished after this state
        if hook is not None:
            hook(self)

    def get_state(self) -> dict[str, Any]:
        # the whole instance (a field added later cannot be forgotten by a hand-kept list), as data:
        # an inner searcher by its own get_state; a value of an unknown type raises StateError here
        fields = {k: v for k, v in self.__dict__.items() if k not in self.REBUILT}
        return {"class": type(self).__name__, "fields": state_io.encode(fields, f"{type(self).__name__}")}

    def set_state(self, state: dict[str, Any]) -> None:
        if state.get("class") != type(self).__name__:
            raise state_io.StateError(f"searcher state was saved by {state.get('class')}, not {type(self).__name__}")
        fields = state_io.decode(state["fields"])
        unknown = sorted(k for k in fields if k in self.REBUILT)
        if unknown:
            raise state_io.StateError(f"{type(self).__name__}: the state holds constructor fields {unknown}")
        inner = {k: v for k, v in fields.items() if isinstance(v, state_io.SavedSearcher)}
        self.__dict__.update({k: v for k, v in fields.items() if k not in inner})
        for name, saved in inner.items():  # after the plain fields: a rebuild may need them
            setattr(self, name, state_io.apply_searcher(saved, self.__dict__.get(name), f"{type(self).__name__}.{name}",
                                                        rebuild=lambda n=name: self._rebuild(n)))

    def _rebuild(self, name: str) -> Searcher:
        """A fresh inner searcher for field ``name`` that was None at construction (its state is applied next)."""
        raise state_io.StateError(f"{type(self).__name__}: no rebuild for the inner searcher {name!r}")


def add_evaluated(searcher: Searcher, config: dict, score: float | None, early: Any = None, cut: bool = False) -> None:
    """Tell an inner searcher the result of a configuration it did not suggest (Ray's ``add_evaluated_point``):
    ``score`` None is a failure; ``early`` (the scheduler's stop at a rung, or the rung) makes it a
    low-fidelity observation; ``cut`` (stopped at a stage deadline) a lower bound, for kgtuner's searchers."""
    kwargs = {"cut": True} if cut and isinstance(searcher, SpaceSearcher) else {}
    searcher.add_evaluated_point(dict(config), math.nan if score is None else float(score), error=score is None,
                                 pruned=early is not None and score is not None, **kwargs)
