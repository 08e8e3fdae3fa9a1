"""The strategy contract: what a search strategy declares, and what the coordinator asks of it.

A strategy is one class in one module of :mod:`kgtuner.tune.strategies`, found by its ``names`` (the
``search.name`` values of ``conf/search/*.yaml`` it serves). The coordinator is a strategy-agnostic
driver: it loads the full graph, starts Ray, runs one Tune run with the strategy's searcher and
scheduler, records every trial and writes the outputs; everything particular to a search lives in its
strategy:

* before Ray starts (classmethods, called by ``ExperimentSettings.from_config``): :meth:`parse` its
  ``search`` keys into validated options (ConfigError naming the key), :meth:`budget_split` (share of
  the budget of stage 1, when it has stages), :meth:`early_stop_policy` (may ``search.early_stop`` be
  set) and :meth:`trial_controls` (the training controls of each stage, for the ASHA checks);
* which graphs it needs (:meth:`prepare` gets the full graph and samples what else it trains on;
  :meth:`graphs`), the stages whose small trials share GPUs (:attr:`packed_stages`), its stages and
  their deadlines (:meth:`stages`: graph, training controls, active second at which the stage ends),
  its searcher (:meth:`searcher`, usually a
  :class:`~kgtuner.tune.strategies.meta.MetaSearcher`) and scheduler (:meth:`scheduler`);
* how it picks the answer (:meth:`best_row`, :meth:`answer_stage`, :meth:`from_subgraph`,
  :meth:`stage1_sizes`, :meth:`warnings`, :meth:`describe_answer`), and what it adds to the summary
  (:meth:`summary`, :meth:`stage_labels`);
* its own reactions to the search's typed events (:meth:`on_event`: log lines, ``kgtuner_state.json``
  entries).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from kgtuner.errors import ConfigError
from kgtuner.tune import events
from kgtuner.tune.budget import Budget
from kgtuner.tune.early_stop import AshaSettings, make_scheduler, parse_early_stop
from kgtuner.tune.keys import check_keys
from kgtuner.tune.results import ResultsStore


#: ``search`` keys every strategy has (``early_stop``/``asha`` are then allowed or refused by its
#: ``early_stop_policy``, with the reason).
COMMON_SEARCH_KEYS = ("name", "early_stop", "asha", "warm_start", "points_to_evaluate")

#: Searcher kinds that can use an earlier run's rows (``search.warm_start``): RF+BORE, as prior observations
#: labelled per group. (TPE's Optuna study runs kgtuner's conditional space define-by-run, and Ray's
#: ``OptunaSearch.add_evaluated_point`` refuses such a study; random search would ignore the rows.)
WARM_KINDS = ("rf_bore",)


#: Subgraph samplers of ``kgtuner.data.sample_subgraph``.
SAMPLERS = ("multi_rw", "single_rw", "random_edge", "pagerank")


def parse_sampler(search: Mapping[str, Any], default: str) -> str:
    """``search.subgraph_sampler`` (``default`` when absent), checked."""
    sampler = search.get("subgraph_sampler", default)
    if sampler not in SAMPLERS:
        raise ConfigError(f"search.subgraph_sampler must be one of {list(SAMPLERS)}, got {sampler!r}")
    return str(sampler)


@dataclass(frozen=True)
class StageSpec:
    """One stage of a search: the graph its trials train on, their training controls (the engine's
    keys: ``max_steps``, ``valid_every``, ``patience``, ...) and the active second at which it ends."""

    graph_key: str
    controls: dict
    end_s: float = math.inf


def graph_key(graph) -> str:
    """The key of a KnowledgeGraph in the trainable's graph table."""
    return f"{graph.name}:{len(graph.train)}"


def train_controls(settings, stage_controls) -> dict:
    """The trainable's controls for a stage: ``trial.stageN``, ``trial.engine`` and the model's options."""
    out = {**stage_controls.as_train_dict(), "max_epochs": None, **getattr(settings.trial, "engine", {})}
    options = settings.model.get("options")
    if options:
        out["model_options"] = dict(options)
    return out


class Strategy:
    """Base class of the search strategies (see the module docstring)."""

    #: ``search.name`` values this strategy serves.
    names: ClassVar[tuple[str, ...]] = ()
    #: summary.json's ``two_stage`` (the search trains on a subgraph first, then on the full graph).
    two_stage: ClassVar[bool] = False
    #: The strategy's own ``search`` keys (besides :data:`COMMON_SEARCH_KEYS`); any other key is refused.
    search_keys: ClassVar[tuple[str, ...]] = ()
    #: ``search`` sub-groups holding a searcher's keyword arguments -> the searcher kind they configure
    #: (``kgtuner.search.factory.check_searcher_keys`` checks them before Ray starts; see :meth:`searcher_kinds`).
    searcher_groups: ClassVar[dict[str, str]] = {}

    def __init__(self, settings):
        self.settings = settings
        self.options = settings.options
        self.full = None
        # stage -> (resources, slots) of each packed stage on this cluster (the driver's ResourcePlan.stages),
        # set before :meth:`searcher`; empty: every stage has the slots and resources the driver passes
        self.packing: dict[int, tuple[dict, int]] = {}

    # ------------------------------------------------------------------ before Ray starts
    @classmethod
    def searcher_kinds(cls, search: Mapping[str, Any]) -> dict[str, str]:
        """``search`` sub-group -> searcher kind whose keyword arguments it holds."""
        return dict(cls.searcher_groups)

    @classmethod
    def allowed_search_keys(cls, search: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(COMMON_SEARCH_KEYS) + tuple(cls.search_keys) + tuple(cls.searcher_kinds(search))

    @classmethod
    def check_search_keys(cls, search: Mapping[str, Any]) -> None:
        """ConfigError for a ``search`` key this strategy does not have (e.g. ``search.topk``), naming the
        nearest valid one; then the searcher groups' keyword arguments."""
        name = search.get("name")
        check_keys(search, cls.allowed_search_keys(search), prefix="search.", owner=f"search={name}")
        from kgtuner.search.factory import check_searcher_keys

        for group, kind in cls.searcher_kinds(search).items():
            check_searcher_keys(search, group, kind)
        points = search.get("points_to_evaluate")
        if points is not None and (not isinstance(points, (list, tuple)) or
                                   not all(isinstance(p, Mapping) for p in points)):
            raise ConfigError(f"search.points_to_evaluate must be a list of configurations (mappings of "
                              f"hyper-parameters), got {points!r}")
        if search.get("warm_start"):
            if cls.warm_kind(search) not in WARM_KINDS:
                raise ConfigError(f"search.warm_start works with the RF+BORE searches (kgtuner, kgtuner_asha, rf_bore), "
                                  f"not search={name}: its searcher cannot take the earlier rows; drop "
                                  "search.warm_start or choose one of those")
            from kgtuner.tune.warm_start import load_sources

            load_sources(search.get("warm_start"))  # every source readable, or one line naming the file

    @classmethod
    def check_points(cls, settings) -> None:
        """``search.points_to_evaluate`` checked against the space (the dataset's name from ``data``), so a bad
        entry is one line before Ray starts (the searcher checks them again over the loaded graph's space)."""
        points = settings.search.get("points_to_evaluate")
        if not points:
            return
        from pathlib import Path

        from kgtuner.search import load_space

        data = settings.data
        dataset = Path(str(data.get("path"))).name if data.get("name") == "folder" else data.get("name")
        space = load_space(settings.space, model=settings.model_name, dataset=dataset)
        for i, point in enumerate(points):
            space.check_config(cls.point_for_space(point, space), f"search.points_to_evaluate[{i}]")

    @classmethod
    def point_for_space(cls, point: Mapping[str, Any], space) -> dict:
        """A ``search.points_to_evaluate`` entry as the searcher receives it (KGTuner: at stage-1 sizes)."""
        return dict(point)

    @classmethod
    def warm_kind(cls, search: Mapping[str, Any]) -> str:
        """The searcher kind that receives ``search.warm_start``'s rows."""
        return "rf_bore"

    @classmethod
    def parse(cls, search: Mapping[str, Any], budget: Budget, trial) -> Any:
        """Validate the strategy's own ``search`` keys; return its options (``settings.options``)."""
        return None

    @classmethod
    def budget_split(cls, search: Mapping[str, Any]) -> float:
        """Share of the budget for stage 1 (``Budget.stage1_fraction``; unused by a one-stage search)."""
        return 0.5

    @classmethod
    def extension_refusal(cls, search: Mapping[str, Any]) -> str | None:
        """Why ``resume=true`` with a larger budget cannot continue this strategy's search (None: it can)."""
        return None

    @classmethod
    def early_stop_policy(cls, search: Mapping[str, Any]) -> tuple[str, str]:
        """(``"refused"`` | ``"optional"`` | ``"required"``, the hint of the error message)."""
        name = search.get("name")
        return "refused", (f"search.early_stop works with the strategies whose searchers take a stopped trial as "
                           f"a low-fidelity observation, not search={name}; drop search.early_stop")

    @classmethod
    def trial_controls(cls, trial) -> dict[int, Any]:
        """Stage -> ``StageControls`` of its trials (one stage: the full-fidelity ``trial.stage2``)."""
        return {1: trial.stage2}

    @classmethod
    def parse_asha(cls, search: Mapping[str, Any], trial) -> AshaSettings | None:
        """``search.early_stop``/``search.asha`` checked against :meth:`early_stop_policy`; None when off."""
        mode = search.get("early_stop")
        off = mode in (None, False, "none", "null")
        policy, hint = cls.early_stop_policy(search)
        if policy == "refused" and not off:
            raise ConfigError(hint.format(mode=mode))
        if policy == "required" and off:
            raise ConfigError(hint.format(mode=mode))
        return parse_early_stop(search, cls.trial_controls(trial))

    # ------------------------------------------------------------------ graphs and stages
    def prepare(self, full) -> None:
        """Take the full graph (loaded by the driver); sample whatever else the search trains on."""
        self.full = full

    def graphs(self) -> dict[str, Any]:
        """Graph key -> KnowledgeGraph of every distinct graph the trials train on."""
        return {graph_key(self.full): self.full}

    @property
    def packed_stages(self) -> dict[int, Any]:
        """Stage -> its largest trial (:class:`kgtuner.cluster.packing.TrialSize`; None before :meth:`prepare`) of each
        stage whose small trials may share a GPU, ``trial.stage1_per_gpu`` at a time (fractional GPUs); the sizes let
        ``trial.stage1_per_gpu=auto`` choose k from their memory. Empty by default: nothing is packed."""
        return {}

    def trial_size(self, graph) -> Any:
        """The largest trial the search's space can draw on ``graph`` (None before :meth:`prepare`): its entities and
        relations, the space's largest dim, batch size and negatives, the model (``kgtuner.cluster.packing``)."""
        if graph is None or self.full is None:
            return None
        from kgtuner.cluster.packing import stage_size

        if getattr(self, "_size_space", None) is None:
            self._size_space = self.space(self.full.name)
        return stage_size(self._size_space, graph, model=self.settings.model_name,
                          model_options=self.settings.model.get("options"))

    def packing_text(self, stage: int, slots: int) -> str:
        """The start-up line's words for a packed ``stage`` (empty when it is not packed on this cluster):
        ``N concurrent trials, {resources} each (trial.stage1_per_gpu=k)``."""
        if stage not in self.packing:
            return ""
        share, n = self.packing[stage]
        setting = self.settings.trial.stage1_per_gpu
        k = f"auto: {n // max(1, slots)} per GPU" if setting == "auto" else setting
        return f"{n} concurrent trials, {share} each (trial.stage1_per_gpu={k})"

    def notes(self) -> list[str]:
        """Log lines after :meth:`prepare` (e.g. GraSH's rounds)."""
        return []

    def data_note(self) -> str:
        """What the data log line adds after the full graph (e.g. the stage-1 subgraph)."""
        return ""

    def stages(self) -> dict[int, StageSpec]:
        """Stage -> spec. One stage: the full graph, ``trial.stage2``'s controls, the whole budget."""
        return {1: StageSpec(graph_key(self.full), train_controls(self.settings, self.settings.trial.stage2),
                             self.settings.budget.end_s)}

    def answer_stage(self) -> int:
        """The stage whose trials can become the answer (the last one; known before :meth:`prepare`)."""
        return 1

    def answer_controls(self) -> dict:
        """Training controls written into best_config.yaml (the full-fidelity ones)."""
        return train_controls(self.settings, self.settings.trial.stage2)

    def stage_gauge(self, stage: int) -> int:
        """The ``kgtuner_stage`` gauge's value of ``stage`` (1: reduced fidelity, 2: full graph)."""
        return stage

    def initial_state(self) -> dict:
        """The strategy's entries of a fresh ``kgtuner_state.json`` (``top``/``candidates``: KGTuner's
        stage-2 candidates, None elsewhere; kept in every state file for its readers)."""
        return {"top": None, "candidates": None}

    # ------------------------------------------------------------------ the search
    def space(self, dataset: str):
        """The search space (the ``space`` group; conf/search/*.yaml picks each strategy's default)."""
        from kgtuner.search import load_space

        return load_space(self.settings.space, model=self.settings.model_name, dataset=dataset)

    def searcher(self, space, slots: int):
        """The Tune searcher of the search (it answers FINISHED at the end of the budget)."""
        raise NotImplementedError

    def searcher_budget(self) -> dict[str, Any]:
        """The budget fields of this strategy's searcher under ``settings.budget`` (its constructor's
        arguments, named as the searcher's fields): a resume that extends the budget sets them on the
        restored searcher (``MetaSearcher.extend_budget``)."""
        raise NotImplementedError

    def extension_note(self) -> str:
        """What a larger budget on ``resume=true`` does for this strategy (summary.json's
        ``budget.extension``)."""
        return "the added budget runs more trials of the same searcher, which keeps every observation it had"

    def points(self) -> list[dict]:
        """``search.points_to_evaluate``: configurations run first (checked by the searcher against its space)."""
        return [dict(p) for p in self.settings.search.get("points_to_evaluate") or []]

    def warm_groups(self) -> list:
        """``search.warm_start``'s row groups (:class:`kgtuner.tune.warm_start.WarmRows`), read once."""
        if getattr(self, "_warm", None) is None:
            from kgtuner.tune.warm_start import load_sources

            self._warm, self._warm_sources = load_sources(self.settings.search.get("warm_start"))
            self.warm_report: list[dict] = []
        return self._warm

    def apply_warm_start(self, searcher, graph_name: str, label: str) -> int:
        """Give the RF+BORE ``searcher`` the earlier runs' rows as prior observations, each group labelled
        among its own rows; rows measured on ``graph_name`` are its own fidelity (never proposed again).
        Returns the rows used; ``warm_report`` records each group (rows outside the space are dropped)."""
        used = 0
        for g in self.warm_groups():
            same = g.graph == graph_name
            n = searcher.add_prior_observations(g.rows, g.group, same_fidelity=same)
            used += n
            self.warm_report.append({"searcher": label, "group": g.group, "source": g.source, "graph": g.graph,
                                     "stage": g.stage, "rows": len(g.rows), "used": int(n),
                                     "dropped": len(g.rows) - int(n), "same_fidelity": same})
        return used

    def warm_summary(self) -> dict | None:
        """summary.json's ``warm_start``: the sources and, per searcher and group, the rows used and dropped."""
        if not self.settings.search.get("warm_start"):
            return None
        self.warm_groups()
        return {"sources": list(self._warm_sources), "groups": list(self.warm_report)}

    def scheduler(self):
        """The Tune scheduler: ASHA per stage when ``search.early_stop=asha``, else None (FIFO)."""
        return make_scheduler(self.settings.early_stop_settings(),
                              {stage: spec.controls for stage, spec in self.stages().items()})

    def describe(self, space_name: str, slots: int, resources: dict) -> str:
        """The log line that opens the search."""
        raise NotImplementedError

    def budget_text(self) -> str:
        budget = self.settings.budget
        return f"{budget.seconds:g}s" if budget.timed else f"{budget.trials} trials"

    # ------------------------------------------------------------------ the answer and the summary
    def best_row(self, store: ResultsStore) -> dict | None:
        """The answer: the best trial of the answer stage by validation MRR."""
        return store.best(self.answer_stage())

    def from_subgraph(self, best: dict | None) -> bool:
        """True when the answer's metrics were measured on a reduced graph (summary's ``best.from_subgraph``)."""
        return False

    def stage1_sizes(self, best: dict | None) -> bool:
        """True when the answer was trained at KGTuner's reduced stage-1 sizes (batch size, dimension, steps),
        on a subgraph (:meth:`from_subgraph`) or not (``search.subgraph_ratio=1``): ``best.stage1_sizes``."""
        return False

    def warnings(self, best: dict | None) -> list[str]:
        """summary.json's ``warnings`` about the answer: never a silent reduced-fidelity answer."""
        return []

    def describe_answer(self, best: dict, state: Mapping[str, Any], early_stopped: bool) -> dict:
        """summary.json's ``best.strategy``: which search (and which stage of it) produced the answer."""
        raise NotImplementedError

    def summary(self, state: Mapping[str, Any], store: ResultsStore) -> dict:
        """Keys the strategy adds to summary.json (``budget`` is merged into the driver's). Every
        summary has KGTuner's switch keys, null unless a strategy fills them."""
        return {"budget": {"stage1_fraction": None, "grace_s": None, "stage1_closed_s": None,
                           "switch_wait_s": None},
                "stage_switch_s": None, "stage2_started_s": None, "stage2_top": None, "stage2_candidates": None}

    def stage_labels(self) -> dict[int, str] | None:
        """Legend text per stage in search_curve.png (None: the defaults)."""
        return None

    # ------------------------------------------------------------------ events
    def on_event(self, event: events.SearchEvent, driver) -> None:
        """React to an event of the search (after the driver's own handling): log lines, state entries."""
