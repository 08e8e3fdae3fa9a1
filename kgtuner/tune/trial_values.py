"""The values every trial of a search will receive, checked before the search starts.

A search hands each trial the searcher's hyper-parameters plus the model (``model.name``,
``model.options``) and its stage's training controls, and the trainable builds
``kgtuner.kge.TrainConfig.from_dict`` from them -- the validator of ``kgtuner train``. A value that
validator refuses fails every trial that gets it: ``model.name=foo`` or a space parameter fixed at
``dim: -8`` once made a launch run hundreds of failing trials and leave an experiment behind.
:func:`check_trial_values` therefore builds, for every stage, the configurations a trial can receive at
their extremes -- each fixed value, each choice, both ends of each range, each stage-2 size (KGTuner's
batch x dim expansion) and every fixed value together -- and validates each one the way the trainer
does. The coordinator calls it once the space is loaded, before Ray starts and before anything is
written to the run directory; a refusal is one :class:`~kgtuner.errors.ConfigError` line (exit 2).

A fixed value, a range end or a stage-2 size the trainer refuses is refused. A refused *choice* fails
only the trials that draw it: it is refused when every choice of the parameter is, and otherwise
returned as a warning for the log (e.g. the full space's ``dim`` choice 2000 with ``model=tucker``,
whose core would need 30 GiB). A combination of searched values that only some trials draw stays a
per-trial failure.
"""

from __future__ import annotations

from typing import Any, Iterable

from kgtuner.errors import ConfigError

__all__ = ["check_trial_values", "stage_values"]

#: Seed used in the checked configurations (any valid seed: the trainable sets each trial's own).
_CHECK_SEED = 0


def _values(param) -> list[tuple[str, Any]]:
    """(what, value) of a space parameter at its extremes: a fixed value, every choice, a range's two ends."""
    from kgtuner.search.params import ChoiceParam

    if isinstance(param, ChoiceParam):
        if len(param.values) == 1:
            return [("its fixed value", param.to_value(0))]
        return [("its choice", param.to_value(i)) for i in range(len(param.values))]
    return [("the low end of its range", param.to_value(0.0)), ("the high end of its range", param.to_value(1.0))]


def stage_values(space, stage: int, expand: dict | None) -> dict[str, list[tuple[str, str, Any]]]:
    """Hyper-parameter -> [(source, what, value), ...] a stage's trials can receive at the extremes:
    the space's parameters, with ``expand`` (KGTuner's stage-2 batch x dim sizes) replacing theirs in stage 2."""
    out: dict[str, list[tuple[str, str, Any]]] = {}
    for p in space.params:
        out[p.name] = [(f"space parameter '{p.name}'", what, v) for what, v in _values(p)]
    for name, vals in (expand or {}).items():
        out[name] = [(f"the stage-2 size '{name}' (space stage2.expand)", "its value", v) for v in vals]
    return out


def _excluded(space, cfg: dict) -> bool:
    """True when a partial configuration matches one of the space's exclusions (never drawn)."""
    from kgtuner.search.params import same_value

    for ex in getattr(space, "exclusions", ()):
        if all(key in cfg and any(same_value(cfg[key], v) for v in vals) for key, vals in ex.when.items()):
            return True
    return False


def _refusal(source: str, what: str, value: Any, stage_text: str, exc: Exception) -> ConfigError:
    return ConfigError(
        f"{source}: {what} {value!r} would fail every{stage_text} trial that receives it: {exc} (the trainer's "
        "check, as in `kgtuner train`); fix the value and launch again")


def check_trial_values(settings, space, stages: dict[int, Any] | None = None) -> list[str]:
    """Raise :class:`~kgtuner.errors.ConfigError` (one line) when a value some trials are certain to receive
    is one the trainer refuses: the model, each space parameter's fixed value, choices and range ends, the
    stage-2 sizes, and every stage's fixed values together, each with that stage's training controls.

    ``settings``: the :class:`~kgtuner.tune.settings.ExperimentSettings`; ``space``: the loaded search space
    (``Strategy.space``); ``stages``: stage -> ``StageControls`` (default: the strategy's ``trial_controls``).
    Returns the warnings for the log: choices that fail the trials drawing them (see the module docstring).
    """
    from kgtuner.kge import TrainConfig
    from kgtuner.kge.models import MODELS
    from kgtuner.tune.strategies.base import train_controls

    model = settings.model_name
    if str(model).lower() not in MODELS:
        raise ConfigError(f"model.name={model!r} would fail every trial: unknown model {model!r}; choose one of "
                          f"{', '.join(MODELS)} (e.g. model=complex)")
    if stages is None:
        stages = settings.strategy_class.trial_controls(settings.trial)
    expand = None
    if getattr(space, "stage2", None) is not None and settings.two_stage:
        expand = {k: list(v) for k, v in space.stage2.expand.items()}
    multi = len(stages) > 1
    warnings: list[str] = []
    for stage, controls in sorted(stages.items()):
        stage_text = f" stage-{stage}" if multi else ""
        base = {**train_controls(settings, controls), "model": model, "seed": _CHECK_SEED}
        values = stage_values(space, stage, expand if stage == 2 else None)

        def check(cfg: dict) -> None:
            TrainConfig.from_dict(cfg)

        # the model, its options and the stage's controls, then every dim (the model's options may depend on it)
        dims: Iterable = values.get("dim") or [("the default dimension", "", TrainConfig.dim)]
        ref_dim = None
        for source, what, value in dims:
            try:
                check({**base, "dim": value})
            except ConfigError as exc:
                if "dim" not in values:
                    raise ConfigError(f"model {model!r} with trial.stage{stage}'s controls would fail every trial: "
                                      f"{exc}") from None
                continue  # the dimension's values are checked with the others below
            ref_dim = value
            break
        if ref_dim is None and "dim" in values:  # no dimension works: name the first one's reason
            source, what, value = values["dim"][0]
            try:
                check({**base, "dim": value})
            except ConfigError as exc:
                raise _refusal(source, what if what != "its choice" else "every choice, e.g.", value, stage_text,
                               exc) from None
        ref = {**base, "dim": ref_dim if ref_dim is not None else TrainConfig.dim}
        for name, entries in values.items():
            refused = []
            for source, what, value in entries:
                try:
                    check({**ref, name: value})
                except ConfigError as exc:
                    if what != "its choice":
                        raise _refusal(source, what, value, stage_text, exc) from None
                    refused.append((source, value, exc))
            if refused and len(refused) == len(entries):  # every choice fails: so does every trial
                source, value, exc = refused[0]
                raise _refusal(source, "every choice, e.g.", value, stage_text, exc) from None
            for source, value, exc in refused:
                text = (f"{source}: its choice {value!r} fails every{stage_text} trial that draws it ({exc}); "
                        "remove it from the space to spend no trial on it")
                if text not in warnings:
                    warnings.append(text)
        fixed = {name: entries[0][2] for name, entries in values.items() if len(entries) == 1}
        if fixed and not _excluded(space, fixed):
            try:
                check({**ref, **fixed})
            except ConfigError as exc:
                shown = ", ".join(f"{k}={v!r}" for k, v in fixed.items())
                raise ConfigError(f"the fixed values of the space ({shown}) would fail every{stage_text} trial "
                                  f"together: {exc} (the trainer's check, as in `kgtuner train`); change one of "
                                  "them and launch again") from None
    return warnings
