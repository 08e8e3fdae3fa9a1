"""A ``SearchSpace`` from a plain Ray Tune ``param_space`` (tune.uniform/loguniform/randint/...).

Nested dicts are flattened with ``/`` (as Ray's own searchers do); suggestions are unflattened
again with ``ray.tune.utils.util.unflatten_dict``. Constants stay in Ray's config (Ray merges them).
"""

from __future__ import annotations

from typing import Any, Mapping

from kgtuner.errors import ConfigError
from kgtuner.search.params import ChoiceParam, FloatParam, IntParam, Param
from kgtuner.search.space import SearchSpace


def has_domains(config: Mapping[str, Any] | None) -> bool:
    """True when a Ray config holds anything to search (a Domain or grid search)."""
    if not config:
        return False
    from ray.tune.search.variant_generator import parse_spec_vars

    _, domains, grids = parse_spec_vars(dict(config))
    return bool(domains or grids)


def space_from_ray(config: Mapping[str, Any]) -> SearchSpace:
    """Convert the Domains of a Ray Tune ``param_space``; unsupported ones raise ``ConfigError``."""
    from ray.tune.search.sample import Categorical, Float, Integer, LogUniform, Quantized, Uniform
    from ray.tune.search.variant_generator import parse_spec_vars

    _, domains, grids = parse_spec_vars(dict(config))
    if grids:
        names = ["/".join(map(str, p)) for p, _ in grids]
        raise ConfigError(f"param_space: grid_search is not supported by this searcher ({names}); "
                          "use tune.choice([...]) instead")
    params: list[Param] = []
    for path, dom in domains:
        name = "/".join(map(str, path))
        sampler = dom.get_sampler()
        q = None
        if isinstance(sampler, Quantized):
            q, sampler = sampler.q, sampler.get_sampler()
        if isinstance(dom, Categorical):
            params.append(ChoiceParam(name, list(dom.categories)))
        elif isinstance(dom, (Float, Integer)) and isinstance(sampler, (Uniform, LogUniform)):
            log = isinstance(sampler, LogUniform)
            if isinstance(dom, Integer):
                # Ray: randint/lograndint upper bound exclusive, q > 1 quantized bounds inclusive
                upper = dom.upper - (1 if (q is None or q == 1) else 0)
                params.append(IntParam(name, dom.lower, upper, log, q))
            else:
                params.append(FloatParam(name, float(dom.lower), float(dom.upper), log, q))
        else:
            raise ConfigError(f"param_space: key '{name}': {type(dom).__name__} with sampler "
                              f"{type(sampler).__name__} is not supported; use tune.uniform, loguniform, "
                              "quniform, qloguniform, randint, lograndint, qrandint or choice")
    return SearchSpace(params, name="param_space")
