"""Search spaces and Ray Tune searchers: ``SearchSpace``/``load_space``, ``RFBORESearcher``,
the random and TPE baselines, and ``make_searcher`` (selected by ``conf/search/*.yaml``)."""

from kgtuner.search.base import RandomSearcher, SpaceSearcher
from kgtuner.search.factory import SEARCHERS, make_searcher, make_stage2_searcher, stage2_candidates
from kgtuner.search.loading import load_space, parse_space
from kgtuner.search.ray_space import space_from_ray
from kgtuner.search.rf_bore import RFBORESearcher
from kgtuner.search.space import Exclusion, SearchSpace, Stage2Spec

__all__ = [
    "SearchSpace", "Exclusion", "Stage2Spec", "load_space", "parse_space", "space_from_ray",
    "SpaceSearcher", "RandomSearcher", "RFBORESearcher",
    "SEARCHERS", "make_searcher", "make_stage2_searcher", "stage2_candidates",
]
