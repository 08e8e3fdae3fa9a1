"""Validated settings of one search experiment, read from the launcher's Hydra config.

Everything is checked here, before Ray starts, so a bad override ends with one clear
:class:`~kgtuner.errors.ConfigError` naming the key and the fix. The ``search`` group's own keys are
checked by its strategy (``kgtuner.tune.strategies``: ``Strategy.parse``), found by ``search.name``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from kgtuner.errors import ConfigError
from kgtuner.tune.budget import Budget
from kgtuner.cluster.packing import ray_share
from kgtuner.cluster.resources import AUTO
from kgtuner.cluster.ray_cluster import CLUSTER_KEYS
from kgtuner.tune.strategies import strategy_class
from kgtuner.tune.keys import check_keys
from kgtuner.tune.trackers import TrackerSettings
from kgtuner.validation import boolean, number

#: The config groups of the launcher (conf/config.yaml's defaults).
GROUPS = ("data", "model", "space", "search", "budget", "trial", "cluster")
#: Every top-level key of the launcher's config: its groups, conf/config.yaml's own keys, and Hydra's
#: (``hydra`` is present only when the config is composed with it).
TOP_LEVEL_KEYS = GROUPS + ("name", "seed", "resume", "final", "answer", "hydra", "tracker")
#: Keys of the ``data`` group (conf/data/*.yaml; read by kgtuner.data.from_config).
DATA_KEYS = ("name", "path", "unseen", "ogb_root")
BUDGET_KEYS = ("seconds", "trials", "grace_fraction")
TRIAL_KEYS = ("gpus", "cpus", "stage1_per_gpu", "pack_one_stage", "gpu_memory_gb", "max_failures",
              "checkpoint_every_s", "stage1", "stage2", "engine", "inject_failures")
#: ``trial.engine``: how every trial's step runs (kgtuner.kge.TrainConfig's names; no hyper-parameter among them).
ENGINE_KEYS = ("amp", "compile", "cuda_graph", "tf32")
STAGE_KEYS = ("max_steps", "valid_every", "patience", "max_valid_triples")
FINAL_KEYS = ("seeds",)


def _plain(node: Any) -> Any:
    """A DictConfig/ListConfig (or anything else) as plain Python containers (interpolations resolved)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not OmegaConf.is_config(node):
        return node
    try:
        return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        hint = ""
        if str(key).startswith("data.path"):
            hint = " (give data.path=DIR or set KGTUNER_DATA_PATH / KGTUNER_DATA_ROOT; see conf/data/folder.yaml)"
        raise ConfigError(f"config key {key}: {str(exc).splitlines()[0]}{hint}") from None


@dataclass(frozen=True)
class StageControls:
    """Training controls of the trials of one stage (engine names). ``max_valid_triples``: validation
    ranks a fixed sample of that many valid triples (None: all; ``TrainConfig.max_valid_triples``)."""

    max_steps: int
    valid_every: int
    patience: int
    max_valid_triples: int | None = None

    @classmethod
    def from_mapping(cls, section: str, cfg: Mapping[str, Any]) -> "StageControls":
        cfg = dict(cfg or {})
        check_keys(cfg, STAGE_KEYS, prefix=f"{section}.", owner=section)
        return cls(
            max_steps=number(f"{section}.max_steps", cfg.get("max_steps"), integer=True, minimum=1),
            valid_every=number(f"{section}.valid_every", cfg.get("valid_every"), integer=True, minimum=1),
            patience=number(f"{section}.patience", cfg.get("patience"), integer=True, minimum=1),
            max_valid_triples=number(f"{section}.max_valid_triples", cfg.get("max_valid_triples"), integer=True,
                                     minimum=1, allow_none=True),
        )

    def as_train_dict(self) -> dict[str, int | None]:
        return {"max_steps": self.max_steps, "valid_every": self.valid_every, "patience": self.patience,
                "max_valid_triples": self.max_valid_triples}


def _per_gpu(value: Any) -> int | str:
    """``trial.stage1_per_gpu``: ``"auto"`` or a whole number >= 1, else a ConfigError naming the key, value and fix."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        return number("trial.stage1_per_gpu", value, integer=True, minimum=1)
    except ConfigError:
        raise ConfigError(f"trial.stage1_per_gpu must be auto or a whole number >= 1 (trials per GPU in the packed "
                          f"stages), got {value!r}: set trial.stage1_per_gpu=auto (k from the trials' memory and the "
                          "CPUs per GPU) or e.g. trial.stage1_per_gpu=2") from None


@dataclass(frozen=True)
class TrialSettings:
    """Resources and controls of every trial (config group ``trial``)."""

    gpus: float
    cpus: float | None  # None: cluster CPUs / concurrent trials
    max_failures: int
    checkpoint_every_s: float | None  # None: never checkpoint
    stage1: StageControls
    stage2: StageControls
    inject_failures: tuple[int, ...] = ()
    # trials of a packed stage (KGTuner's stage 1, GraSH's subgraph rounds, a one-stage search with pack_one_stage)
    # per GPU share (fractional GPUs): an integer, or "auto" (from the trials' memory and the CPUs per GPU)
    stage1_per_gpu: int | str = AUTO
    pack_one_stage: bool = False  # the one-stage searches pack their trials too
    gpu_memory_gb: float | None = None  # one GPU's memory for "auto" when the driver cannot see it (None: detect)
    #: ``trial.engine``: engine switches of every trial (``ENGINE_KEYS``: amp, compile, cuda_graph, tf32)
    engine: dict = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> "TrialSettings":
        cfg = dict(cfg or {})
        check_keys(cfg, TRIAL_KEYS, prefix="trial.", owner="trial")
        cpus = cfg.get("cpus", "auto")
        if cpus in (None, "auto"):
            cpus = None
        else:
            cpus = number("trial.cpus", cpus, minimum=0, low_open=True)
        inject = cfg.get("inject_failures") or []
        if not isinstance(inject, (list, tuple)) or any(
                isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in inject):
            raise ConfigError(f"trial.inject_failures must be a list of trial numbers (0, 1, ...), got {inject!r}")
        gpus = number("trial.gpus", cfg.get("gpus", 1), minimum=0)
        per_gpu = _per_gpu(cfg.get("stage1_per_gpu", AUTO))
        if per_gpu != AUTO and gpus > 0 and not ray_share(gpus / per_gpu):
            raise ConfigError(f"trial.stage1_per_gpu={per_gpu} gives stage-1 trials {gpus / per_gpu:.4g} GPUs each "
                              f"(trial.gpus={gpus:g}); Ray places a whole number of GPUs, or 1/m of one (m trials "
                              "filling a GPU): choose k so that trial.gpus / k is one of those")
        return cls(
            gpus=gpus,
            stage1_per_gpu=per_gpu,
            pack_one_stage=boolean("trial.pack_one_stage", cfg.get("pack_one_stage", False)),
            gpu_memory_gb=number("trial.gpu_memory_gb", cfg.get("gpu_memory_gb"), minimum=0, low_open=True,
                                 allow_none=True),
            cpus=cpus,
            max_failures=number("trial.max_failures", cfg.get("max_failures", 2), integer=True, minimum=0),
            checkpoint_every_s=number("trial.checkpoint_every_s", cfg.get("checkpoint_every_s", 60.0), minimum=0,
                                      allow_none=True),
            stage1=StageControls.from_mapping("trial.stage1", cfg.get("stage1")),
            stage2=StageControls.from_mapping("trial.stage2", cfg.get("stage2")),
            inject_failures=tuple(int(i) for i in inject),
            engine=_engine(cfg.get("engine")),
        )


def _engine(cfg: Mapping[str, Any] | None) -> dict:
    """``trial.engine``: ``{switch: bool}`` for the switches set (``ENGINE_KEYS``); an unknown key or a value that is
    not a boolean is a ConfigError naming it."""
    if cfg is not None and not isinstance(cfg, Mapping):
        raise ConfigError(f"trial.engine must be a mapping of {', '.join(ENGINE_KEYS)} to true/false, got {cfg!r} "
                          "(e.g. trial.engine.cuda_graph=true)")
    cfg = dict(cfg or {})
    check_keys(cfg, ENGINE_KEYS, prefix="trial.engine.", owner="trial.engine")
    out = {k: boolean(f"trial.engine.{k}", v) for k, v in cfg.items() if v is not None}
    if out.get("compile") and out.get("cuda_graph"):
        raise ConfigError("trial.engine.compile and trial.engine.cuda_graph both capture the step; choose one "
                          "(cuda_graph captures the optimizer's update too)")
    return out


@dataclass(frozen=True)
class ExperimentSettings:
    """Everything the coordinator needs, validated. Build it with :meth:`from_config`."""

    data: dict
    model: dict
    space: dict
    search: dict
    budget: Budget
    trial: TrialSettings
    cluster: dict
    options: Any = None  # the strategy's own validated knobs (Strategy.parse)
    asha: Any = None     # kgtuner.tune.early_stop.AshaSettings, None when early stopping is off
    final_seeds: int = 0
    seed: int = 0
    resume: bool = False
    name: str = "kgtuner"
    raw: dict = field(default_factory=dict, compare=False, repr=False)
    tracker: TrackerSettings = field(default_factory=TrackerSettings)  # the ``tracker`` group (default: none)

    @property
    def search_name(self) -> str:
        """The ``search`` group's strategy name (``kgtuner``, ``rf_bore``, ``random``, ``tpe``, ``grash``, ...)."""
        return str(self.search.get("name", "kgtuner"))

    @property
    def strategy_class(self):
        """The strategy class of ``search.name`` (``kgtuner.tune.strategies``)."""
        return strategy_class(self.search_name)

    def make_strategy(self):
        """A new strategy instance for this experiment."""
        return self.strategy_class(self)

    @property
    def two_stage(self) -> bool:
        """True when the search runs KGTuner's two stages (subgraph, then full graph)."""
        return bool(self.strategy_class.two_stage)

    @property
    def model_name(self) -> str:
        return str(self.model.get("name"))

    def early_stop_settings(self):
        """``search.early_stop``/``search.asha`` parsed (``kgtuner.tune.early_stop.AshaSettings``), None when off."""
        return self.asha

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "ExperimentSettings":
        """Validate the launcher's composed config (a DictConfig or a plain dict)."""
        cfg = _plain(cfg)
        if not isinstance(cfg, Mapping):
            raise ConfigError(f"the launcher config must be a mapping, got {type(cfg).__name__}")
        for group in GROUPS:
            if not isinstance(cfg.get(group), Mapping):
                raise ConfigError(f"config group '{group}' is missing; choose one, e.g. {group}=<option>")
        if not cfg["model"].get("name"):
            raise ConfigError("model.name is missing (choose a model group, e.g. model=complex)")
        search = dict(cfg["search"])
        strategy = strategy_class(str(search.get("name", "kgtuner")))
        # unknown keys are refused everywhere (a typo would otherwise run the whole search with the default)
        group_keys = {"data": DATA_KEYS, "search": strategy.allowed_search_keys(search), "budget": BUDGET_KEYS,
                      "trial": TRIAL_KEYS, "cluster": CLUSTER_KEYS, "final": FINAL_KEYS}
        check_keys(cfg, TOP_LEVEL_KEYS, owner="the launcher (a top-level key)",
                   also=[f"{g}.{k}" for g, keys in group_keys.items() for k in keys])
        strategy.check_search_keys(search)
        check_keys(cfg["data"], DATA_KEYS, prefix="data.", owner="data")
        check_keys(cfg["cluster"], CLUSTER_KEYS, prefix="cluster.", owner="cluster")
        budget_cfg = dict(cfg["budget"])
        if "stage1_fraction" in budget_cfg:
            raise ConfigError("budget.stage1_fraction is not a setting of budget; did you mean search.stage1_fraction? "
                              "(the stage split is KGTuner's, conf/search/kgtuner.yaml)")
        check_keys(budget_cfg, BUDGET_KEYS, prefix="budget.", owner="budget")
        budget = Budget(
            seconds=number("budget.seconds", budget_cfg.get("seconds"), allow_none=True),
            trials=number("budget.trials", budget_cfg.get("trials"), integer=True, allow_none=True),
            stage1_fraction=strategy.budget_split(search),
            grace_fraction=number("budget.grace_fraction", budget_cfg.get("grace_fraction", 0.05)),
        )
        trial = TrialSettings.from_mapping(cfg["trial"])
        options = strategy.parse(search, budget, trial)
        asha = strategy.parse_asha(search, trial)
        data = dict(cfg["data"])
        if data.get("name") == "folder" and data.get("path") in (None, "", "???"):
            raise ConfigError("data.path is not set: give `data=folder data.path=DIR` (or set KGTUNER_DATA_PATH; "
                              "the experiment presets use $KGTUNER_DATA_ROOT/<dataset>)")
        final = cfg.get("final") or {}
        if not isinstance(final, Mapping):
            raise ConfigError(f"final must be a mapping with the key 'seeds', got {final!r}")
        final = dict(final)
        check_keys(final, FINAL_KEYS, prefix="final.", owner="final")
        cluster = dict(cfg["cluster"])
        for key in ("num_gpus", "num_cpus"):
            if cluster.get(key) is not None:
                number(f"cluster.{key}", cluster[key], minimum=0)
        resume = cfg.get("resume", False)
        if not isinstance(resume, bool):
            raise ConfigError(f"resume must be true or false, got {resume!r}")
        settings = cls(
            data=data,
            model=dict(cfg["model"]),
            space=dict(cfg["space"]),
            search=search,
            budget=budget,
            trial=trial,
            cluster=cluster,
            options=options,
            asha=asha,
            final_seeds=number("final.seeds", final.get("seeds", 0), integer=True, minimum=0),
            seed=number("seed", cfg.get("seed", 0), integer=True, minimum=0),
            resume=resume,
            name=str(cfg.get("name") or "kgtuner"),
            raw=dict(cfg),
            tracker=TrackerSettings.from_mapping(cfg.get("tracker")),
        )
        strategy.check_points(settings)  # search.points_to_evaluate against the space, before Ray starts
        return settings
