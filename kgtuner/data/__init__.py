"""Knowledge-graph data layer: loading, caching, filter index and subgraph sampling.

Contract (see docs/architecture.md)::

    kg = load_dataset("demo" | "ogbl-biokg" | "ogbl-wikikg2" | "/path/to/folder", cache_dir=None, ...)
    fi = FilterIndex.from_graph(kg); rows, cols = fi.true_tails(h, r)
    sub = sample_subgraph(kg, ratio=0.2, seed=0, sampler="multi_rw")
"""

from kgtuner.data.filter_index import FilterIndex
from kgtuner.data.graph import KnowledgeGraph
from kgtuner.data.load import load_dataset
from kgtuner.data.loaders import BUILTIN as BUILTIN_DATASETS
from kgtuner.data.loaders import write_folder
from kgtuner.data.subgraph import SAMPLERS, Subgraph, sample_subgraph
from kgtuner.data.unseen import UNSEEN_POLICIES, DuplicateTriplesWarning, UnseenTriplesWarning

__all__ = [
    "BUILTIN_DATASETS",
    "FilterIndex",
    "KnowledgeGraph",
    "SAMPLERS",
    "Subgraph",
    "UNSEEN_POLICIES",
    "UnseenTriplesWarning",
    "DuplicateTriplesWarning",
    "load_dataset",
    "sample_subgraph",
    "write_folder",
]
