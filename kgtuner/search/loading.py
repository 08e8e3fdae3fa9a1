"""Reading and validating search-space files (``conf/space/*.yaml``).

File format (every key documented in ``conf/space/full.yaml``)::

    params:
      lr:       {type: float, low: 1.0e-5, high: 1.0, log: true}
      gamma:    {type: float, low: 1, high: 24, when: {loss: [MR]}}     # active only with MR
      dim:      {type: choice, values: [100, 200, 500, 1000, 2000]}
      batch_size: {type: fixed, value: 128}                            # a one-value choice
    exclusions:                # forbidden combinations; optional models/datasets filters
      - {when: {negatives: [1VsAll, kVsAll]}, models: [transe, rotate], reason: ...}
    overrides:                 # per-model/per-dataset replacements of whole parameter entries
      - {models: [transe, rotate], params: {gamma: {type: float, low: 1, high: 24}}}   # active for every loss
    stage2:                    # decoupled spaces: stage-2 expansion and its exceptions
      expand: {batch_size: [512, 1024], dim: [1000, 2000]}
      exceptions:
        - {models: [rescal], expand: {dim: [500, 1000]}}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from kgtuner.errors import ConfigError
from kgtuner.paths import CONF_DIR
from kgtuner.search.params import ChoiceParam, Condition, FloatParam, IntParam, Param
from kgtuner.validation import boolean, number
from kgtuner.search.space import Exclusion, SearchSpace, Stage2Spec

_TOP_KEYS = {"name", "description", "params", "exclusions", "overrides", "stage2"}
_PARAM_KEYS = {
    "float": {"type", "low", "high", "log", "step", "when"},
    "int": {"type", "low", "high", "log", "step", "when"},
    "choice": {"type", "values", "when"},
    "fixed": {"type", "value", "when"},
}
_EXCLUSION_KEYS = {"when", "models", "datasets", "reason"}
_OVERRIDE_KEYS = {"models", "datasets", "params", "reason"}


def space_dir() -> Path:
    """Folder of the named spaces (``conf/space``)."""
    return CONF_DIR / "space"


def load_space(name_or_path: str | Path | Mapping, model: str | None = None,
               dataset: str | None = None) -> SearchSpace:
    """Load a search space.

    ``name_or_path`` is a name (``full``, ``shrunk``, ``decoupled``: ``conf/space/NAME.yaml``), a
    path to a YAML file, or an already-parsed mapping (e.g. Hydra's ``cfg.space``). ``model`` and
    ``dataset`` select the exclusions and stage-2 exceptions declared for them; exclusions and
    exceptions restricted to other models/datasets (or to a model when ``model`` is None) are
    not applied.
    """
    if isinstance(name_or_path, Mapping) or hasattr(name_or_path, "items") and not isinstance(name_or_path, (str, Path)):
        data = _to_plain(name_or_path)
        where = f"space '{data.get('name', '<mapping>')}'"
    else:
        path = _resolve(name_or_path)
        where = str(path)
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_space(data, where=where, model=model, dataset=dataset)


def _to_plain(obj: Any) -> dict:
    try:  # an OmegaConf DictConfig from Hydra
        from omegaconf import DictConfig, OmegaConf

        if isinstance(obj, DictConfig):
            return OmegaConf.to_container(obj, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return dict(obj)


def _resolve(name_or_path: str | Path) -> Path:
    s = str(name_or_path)
    if s.endswith((".yaml", ".yml")) or "/" in s or Path(s).suffix:
        path = Path(s)
        if not path.is_file():
            raise ConfigError(f"search-space file {path} does not exist")
        return path
    path = space_dir() / f"{s}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in space_dir().glob("*.yaml"))
        raise ConfigError(f"unknown search space '{s}': expected one of {known} or a path to a YAML file")
    return path


def _list(where: str, key: str, field: str, value: Any) -> list:
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(f"{where}: key '{key}': '{field}' must be a non-empty list, got {value!r}")
    return list(value)


def _param(where: str, name: str, spec: Any) -> Param:
    key = f"params.{name}"
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: key '{key}': expected a mapping with a 'type', got {spec!r}")
    kind = spec.get("type")
    if kind not in _PARAM_KEYS:
        raise ConfigError(f"{where}: key '{key}': unknown type {kind!r}; use one of {sorted(_PARAM_KEYS)}")
    extra = set(spec) - _PARAM_KEYS[kind]
    if extra:
        raise ConfigError(f"{where}: key '{key}': unknown field(s) {sorted(extra)} for type '{kind}' "
                          f"(allowed: {sorted(_PARAM_KEYS[kind])})")
    when = spec.get("when") or {}
    if not isinstance(when, Mapping):
        raise ConfigError(f"{where}: key '{key}.when': expected {{parent: [values]}}, got {when!r}")
    conds = [Condition(str(p), tuple(_list(where, key, f"when.{p}", v))) for p, v in when.items()]
    if kind == "choice":
        values = _list(where, key, "values", spec.get("values"))
        return ChoiceParam(name, values, conds)
    if kind == "fixed":
        if "value" not in spec:
            raise ConfigError(f"{where}: key '{key}': type 'fixed' needs a 'value'")
        return ChoiceParam(name, [spec["value"]], conds)
    for f in ("low", "high"):
        if f not in spec:
            raise ConfigError(f"{where}: key '{key}': type '{kind}' needs '{f}'")
    low = number(f"{where}: key '{key}': 'low'", spec["low"])  # YAML reads 1e-12 as a string: number() parses it
    high = number(f"{where}: key '{key}': 'high'", spec["high"])
    log = boolean(f"{where}: key '{key}': 'log'", spec.get("log", False))
    if low > high:
        raise ConfigError(f"{where}: key '{key}': inverted range: low {spec['low']} > high {spec['high']}; swap them")
    if log and low <= 0:
        raise ConfigError(f"{where}: key '{key}': a log range must be strictly positive, got low {spec['low']} "
                          "(use a small positive bound such as 1.0e-12, or log: false)")
    step = spec.get("step")
    if step is not None:
        step = number(f"{where}: key '{key}': 'step'", step, minimum=0, low_open=True)
    if kind == "int":
        if not (float(low).is_integer() and float(high).is_integer()):
            raise ConfigError(f"{where}: key '{key}': int bounds must be integers, got {spec['low']}, {spec['high']}")
        return IntParam(name, int(low), int(high), log, step, conds)
    return FloatParam(name, low, high, log, step, conds)


def _applies(entry: Mapping, model: str | None, dataset: str | None) -> bool:
    models, datasets = entry.get("models"), entry.get("datasets")
    if models is not None and (model is None or model.lower() not in [str(m).lower() for m in models]):
        return False
    if datasets is not None and (dataset is None or dataset not in [str(d) for d in datasets]):
        return False
    return True


def _apply_overrides(where: str, overrides: Any, params_spec: dict, model: str | None,
                     dataset: str | None) -> dict:
    """``params_spec`` with the entries of every override that applies to ``model``/``dataset`` replaced
    (in place, so the parameter order is kept); every override is validated whether it applies or not."""
    if overrides is None:
        return params_spec
    if not isinstance(overrides, list):
        raise ConfigError(f"{where}: key 'overrides': expected a list of {{models|datasets: [...], params: {{...}}}}")
    for i, ov in enumerate(overrides):
        key = f"overrides[{i}]"
        if not isinstance(ov, Mapping) or not isinstance(ov.get("params"), Mapping) or not ov["params"]:
            raise ConfigError(f"{where}: key '{key}': expected {{models|datasets: [...], params: {{name: domain}}}}")
        bad = set(ov) - _OVERRIDE_KEYS
        if bad:
            raise ConfigError(f"{where}: key '{key}': unknown field(s) {sorted(bad)} (allowed: {sorted(_OVERRIDE_KEYS)})")
        if ov.get("models") is None and ov.get("datasets") is None:
            raise ConfigError(f"{where}: key '{key}': give 'models' and/or 'datasets' (an override for every "
                              "model belongs in 'params')")
        for f in ("models", "datasets"):
            if ov.get(f) is not None:
                _list(where, key, f, ov[f])
        for name, spec in ov["params"].items():
            if name not in params_spec:
                raise ConfigError(f"{where}: key '{key}.params.{name}': not a parameter of 'params' "
                                  f"(known: {sorted(params_spec)})")
            try:  # validated even where it does not apply
                _param(where, str(name), spec)
            except ConfigError as exc:
                raise ConfigError(str(exc).replace(f"key 'params.{name}", f"key '{key}.params.{name}", 1)) from None
        if _applies(ov, model, dataset):
            params_spec.update({str(n): s for n, s in ov["params"].items()})
    return params_spec


def parse_space(data: Any, where: str = "space", model: str | None = None,
                dataset: str | None = None) -> SearchSpace:
    """Build a ``SearchSpace`` from a parsed space file; ``ConfigError`` names ``where`` and the key."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: a space file must be a mapping with a 'params' key")
    extra = set(data) - _TOP_KEYS
    if extra:
        raise ConfigError(f"{where}: unknown top-level key(s) {sorted(extra)} (allowed: {sorted(_TOP_KEYS)})")
    params_spec = data.get("params")
    if not isinstance(params_spec, Mapping) or not params_spec:
        raise ConfigError(f"{where}: key 'params' must map each hyper-parameter name to its domain")
    params_spec = _apply_overrides(where, data.get("overrides"), dict(params_spec), model, dataset)
    params = [_param(where, str(n), s) for n, s in params_spec.items()]
    names = {p.name for p in params}
    for p in params:
        for c in p.conditions:
            if c.parent not in names:
                raise ConfigError(f"{where}: key 'params.{p.name}.when': condition on unknown key '{c.parent}' "
                                  f"(known: {sorted(names)})")

    exclusions = []
    for i, ex in enumerate(data.get("exclusions") or []):
        key = f"exclusions[{i}]"
        if not isinstance(ex, Mapping) or not isinstance(ex.get("when"), Mapping) or not ex["when"]:
            raise ConfigError(f"{where}: key '{key}': expected {{when: {{key: [values]}}, models: [...]}}")
        bad = set(ex) - _EXCLUSION_KEYS
        if bad:
            raise ConfigError(f"{where}: key '{key}': unknown field(s) {sorted(bad)} (allowed: {sorted(_EXCLUSION_KEYS)})")
        for k in ex["when"]:
            if k not in names:
                raise ConfigError(f"{where}: key '{key}.when': unknown key '{k}' (known: {sorted(names)})")
        if _applies(ex, model, dataset):
            when = {str(k): tuple(_list(where, key, f"when.{k}", v)) for k, v in ex["when"].items()}
            exclusions.append(Exclusion(when, str(ex.get("reason", ""))))

    stage2 = None
    if data.get("stage2") is not None:
        s2 = data["stage2"]
        if not isinstance(s2, Mapping) or not isinstance(s2.get("expand"), Mapping):
            raise ConfigError(f"{where}: key 'stage2': expected {{expand: {{key: [values]}}, exceptions: [...]}}")
        expand = {str(k): _list(where, "stage2.expand", k, v) for k, v in s2["expand"].items()}
        for i, exc in enumerate(s2.get("exceptions") or []):
            key = f"stage2.exceptions[{i}]"
            if not isinstance(exc, Mapping) or not isinstance(exc.get("expand"), Mapping):
                raise ConfigError(f"{where}: key '{key}': expected {{models|datasets: [...], expand: {{...}}}}")
            for k in exc["expand"]:
                if k not in expand:
                    raise ConfigError(f"{where}: key '{key}.expand': '{k}' is not an expanded key ({sorted(expand)})")
            if _applies(exc, model, dataset):
                expand.update({str(k): _list(where, key, k, v) for k, v in exc["expand"].items()})
        stage2 = Stage2Spec(expand)

    label = str(data.get("name", where))
    try:
        return SearchSpace(params, exclusions, stage2, name=label if where.startswith("space") else where)
    except ConfigError as exc:
        msg = str(exc)
        raise ConfigError(msg if msg.startswith(where) else f"{where}: {msg}") from None
