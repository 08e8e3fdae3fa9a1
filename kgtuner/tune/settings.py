"""Validated settings of one search experiment, read from the launcher's Hydra config.

Everything is checked here, before Ray starts, so a bad override ends with one clear
:class:`~kgtuner.errors.ConfigError` naming the key and the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from kgtuner.errors import ConfigError
from kgtuner.tune.budget import Budget

#: Search strategies (config group ``search``) that run KGTuner's two stages; others run one stage.
TWO_STAGE_SEARCHES = frozenset({"kgtuner", "kgtuner_asha"})
#: Subgraph samplers of ``kgtuner.data.sample_subgraph``.
SAMPLERS = ("multi_rw", "single_rw", "random_edge", "pagerank")


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


def _number(section: str, key: str, value: Any, *, integer: bool = False, minimum: float | None = None,
            exclusive: bool = False, allow_none: bool = False) -> Any:
    name = f"{section}.{key}" if section else key
    if value is None:
        if allow_none:
            return None
        raise ConfigError(f"{name} is required (got null)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not math.isfinite(value)):
        raise ConfigError(f"{name} must be a {'whole ' if integer else ''}number, got {value!r}")
    if integer and int(value) != value:
        raise ConfigError(f"{name} must be a whole number, got {value!r}")
    if minimum is not None and (value <= minimum if exclusive else value < minimum):
        raise ConfigError(f"{name} must be {'>' if exclusive else '>='} {minimum:g}, got {value!r}")
    return int(value) if integer else float(value)


@dataclass(frozen=True)
class StageControls:
    """Training controls of the trials of one stage (engine names)."""

    max_steps: int
    valid_every: int
    patience: int

    @classmethod
    def from_mapping(cls, section: str, cfg: Mapping[str, Any]) -> "StageControls":
        cfg = dict(cfg or {})
        unknown = set(cfg) - {"max_steps", "valid_every", "patience"}
        if unknown:
            raise ConfigError(f"{section}: unknown key(s) {sorted(unknown)}; allowed: max_steps, valid_every, patience")
        return cls(
            max_steps=_number(section, "max_steps", cfg.get("max_steps"), integer=True, minimum=1),
            valid_every=_number(section, "valid_every", cfg.get("valid_every"), integer=True, minimum=1),
            patience=_number(section, "patience", cfg.get("patience"), integer=True, minimum=1),
        )

    def as_train_dict(self) -> dict[str, int]:
        return {"max_steps": self.max_steps, "valid_every": self.valid_every, "patience": self.patience}


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

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> "TrialSettings":
        cfg = dict(cfg or {})
        allowed = {"gpus", "cpus", "max_failures", "checkpoint_every_s", "stage1", "stage2", "inject_failures"}
        unknown = set(cfg) - allowed
        if unknown:
            raise ConfigError(f"trial: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        cpus = cfg.get("cpus", "auto")
        if cpus in (None, "auto"):
            cpus = None
        else:
            cpus = _number("trial", "cpus", cpus, minimum=0, exclusive=True)
        inject = cfg.get("inject_failures") or []
        if not isinstance(inject, (list, tuple)) or any(
                isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in inject):
            raise ConfigError(f"trial.inject_failures must be a list of trial numbers (0, 1, ...), got {inject!r}")
        return cls(
            gpus=_number("trial", "gpus", cfg.get("gpus", 1), minimum=0),
            cpus=cpus,
            max_failures=_number("trial", "max_failures", cfg.get("max_failures", 2), integer=True, minimum=0),
            checkpoint_every_s=_number("trial", "checkpoint_every_s", cfg.get("checkpoint_every_s", 60.0), minimum=0,
                                       allow_none=True),
            stage1=StageControls.from_mapping("trial.stage1", cfg.get("stage1")),
            stage2=StageControls.from_mapping("trial.stage2", cfg.get("stage2")),
            inject_failures=tuple(int(i) for i in inject),
        )


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
    subgraph_ratio: float = 0.2
    subgraph_sampler: str = "multi_rw"
    top_k: int = 10
    final_seeds: int = 0
    seed: int = 0
    resume: bool = False
    name: str = "kgtuner"
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def search_name(self) -> str:
        """The ``search`` group's strategy name (``kgtuner``, ``rf_bore``, ``random``, ``tpe``)."""
        return str(self.search.get("name", "kgtuner"))

    @property
    def two_stage(self) -> bool:
        """True when the search runs KGTuner's two stages (subgraph, then full graph)."""
        return self.search_name in TWO_STAGE_SEARCHES

    @property
    def model_name(self) -> str:
        return str(self.model.get("name"))

    def early_stop_settings(self):
        """``search.early_stop``/``search.asha`` parsed (``kgtuner.tune.early_stop.AshaSettings``), None when off;
        ConfigError when invalid. Stage 1 of a one-stage search uses ``trial.stage2``'s controls."""
        from kgtuner.tune.early_stop import parse_early_stop

        stages = {1: self.trial.stage1, 2: self.trial.stage2} if self.two_stage else {1: self.trial.stage2}
        return parse_early_stop(self.search, stages)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "ExperimentSettings":
        """Validate the launcher's composed config (a DictConfig or a plain dict)."""
        cfg = _plain(cfg)
        if not isinstance(cfg, Mapping):
            raise ConfigError(f"the launcher config must be a mapping, got {type(cfg).__name__}")
        for group in ("data", "model", "space", "search", "budget", "trial", "cluster"):
            if not isinstance(cfg.get(group), Mapping):
                raise ConfigError(f"config group '{group}' is missing; choose one, e.g. {group}=<option>")
        if not cfg["model"].get("name"):
            raise ConfigError("model.name is missing (choose a model group, e.g. model=complex)")
        search = dict(cfg["search"])
        where = "search"
        budget_cfg = dict(cfg["budget"])
        unknown = set(budget_cfg) - {"seconds", "trials", "grace_fraction"}
        if unknown:
            hint = " (the stage split is search.stage1_fraction)" if "stage1_fraction" in unknown else ""
            raise ConfigError(f"budget: unknown key(s) {sorted(unknown)}; allowed: seconds, trials, "
                              f"grace_fraction{hint}")
        budget = Budget(
            seconds=_number("budget", "seconds", budget_cfg.get("seconds"), allow_none=True),
            trials=_number("budget", "trials", budget_cfg.get("trials"), integer=True, allow_none=True),
            stage1_fraction=_number(where, "stage1_fraction", search.get("stage1_fraction", 0.5)),
            grace_fraction=_number("budget", "grace_fraction", budget_cfg.get("grace_fraction", 0.05)),
        )
        ratio = _number(where, "subgraph_ratio", search.get("subgraph_ratio", 0.2))
        if not 0 < ratio <= 1:
            raise ConfigError(f"search.subgraph_ratio must lie in (0, 1] (fraction of entities kept in the "
                              f"stage-1 subgraph; the paper uses 0.2; 1 runs stage 1 on the full graph), got {ratio}")
        sampler = search.get("subgraph_sampler", "multi_rw")
        if sampler not in SAMPLERS:
            raise ConfigError(f"search.subgraph_sampler must be one of {list(SAMPLERS)}, got {sampler!r}")
        if search.get("name") == "grash":  # GraSH's rounds, eta, num_configs, variant (and the trial budget)
            from kgtuner.tune.grash import GraSHConfig

            GraSHConfig.from_search(search, budget)
        data = dict(cfg["data"])
        if data.get("name") == "folder" and data.get("path") in (None, "", "???"):
            raise ConfigError("data.path is not set: give `data=folder data.path=DIR` (or set KGTUNER_DATA_PATH; "
                              "the experiment presets use $KGTUNER_DATA_ROOT/<dataset>)")
        final = dict(cfg.get("final") or {})
        cluster = dict(cfg["cluster"])
        for key in ("num_gpus", "num_cpus"):
            if cluster.get(key) is not None:
                _number("cluster", key, cluster[key], minimum=0)
        resume = cfg.get("resume", False)
        if not isinstance(resume, bool):
            raise ConfigError(f"resume must be true or false, got {resume!r}")
        settings = cls(
            data=data,
            model=dict(cfg["model"]),
            space=dict(cfg["space"]),
            search=search,
            budget=budget,
            trial=TrialSettings.from_mapping(cfg["trial"]),
            cluster=cluster,
            subgraph_ratio=ratio,
            subgraph_sampler=str(sampler),
            top_k=_number(where, "top_k", search.get("top_k", 10), integer=True, minimum=1),
            final_seeds=_number("final", "seeds", final.get("seeds", 0), integer=True, minimum=0),
            seed=_number("", "seed", cfg.get("seed", 0), integer=True, minimum=0),
            resume=resume,
            name=str(cfg.get("name") or "kgtuner"),
            raw=dict(cfg),
        )
        settings.early_stop_settings()  # validates search.early_stop / search.asha
        return settings
