"""Recorded tables of real KGE training runs (issue 22): record once, replay search methods many times.

A table holds, per graph, finite pools of configurations trained for real at the fidelities the
search strategies use, each run's learning curve with measured seconds, and a card that describes how
it was recorded. The modules:

- :mod:`kgtuner.bench.pool`: the settings of a recording and its pools (stage-1 configurations on
  KGTuner's subgraph, full-space configurations on the full graph, stage-2 expansions of the stage-1
  top, repeated seeds), all drawn from fixed seeds;
- :mod:`kgtuner.bench.record`: training one run with the engine (1 torch thread, time cap) and the
  durable JSONL journal a recording appends to (resumable);
- :mod:`kgtuner.bench.table`: Parquet tables (``runs.parquet``, ``curves.parquet``) and the card
  (``card.md``) generated from the journal;
- :mod:`kgtuner.bench.restore`: the journal rebuilt from its committed table, so a recording continues on
  another machine;
- :mod:`kgtuner.bench.replay`, :mod:`kgtuner.bench.benchmark`, :mod:`kgtuner.bench.compare`: the strategies
  replayed on a table on simulated time, the named grids, and their figures;
- :mod:`kgtuner.bench.cli`: ``kgtuner bench pilot|record|report|restore|replay|compare``.
"""

from kgtuner.bench.pool import POOLS, RecordSettings, RunSpec
from kgtuner.bench.record import Journal, train_config, train_run
from kgtuner.bench.restore import restore_journal
from kgtuner.bench.table import finalize, load_journal

__all__ = ["POOLS", "RecordSettings", "RunSpec", "Journal", "train_config", "train_run", "finalize", "load_journal",
           "restore_journal"]
