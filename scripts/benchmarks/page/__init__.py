"""The generator of docs/benchmarks.md and of the README's benchmark block, one module per group of sections.
Run it as ``python scripts/benchmarks/benchmarks_page.py`` (its entry beside this package); every figure comes from
committed files.

In the page's order:

- ``summary.py``: the summary, first: the fair benchmark's answer cell by cell (or how far its tables are), where
  the superseded replays went, the live suite in one paragraph
- ``fair.py``: issue 38's fair benchmark: the converged tables' recording state (their cards) and the ``fair``
  replay, cell by cell, under its fixed comparison rule
- ``replay.py``: the search strategies replayed on recorded tables, per graph and grid (``frames.py``: the replay
  journals read once, how far each grid is; ``defaults.py``: KGTuner's defaults, the decisions)
- ``live.py``: the live end-to-end suites (large graphs, then small graphs)
- ``analyses.py``: the SRCC ablations, the small-graph ablations, the hyper-parameter importances
- ``superseded.py``: last, the replays on the tables issue 38 found unfair, as they were (with ``stage2.py``: issue
  37's stage-2 study on them, also a script: ``python scripts/benchmarks/page/stage2.py``)
- ``readme.py``: the README's block between its markers: one short table (a row per budget, a column per graph)
- ``main.py``: ``render`` (the page, section by section) and ``main`` (the command line); ``collect.py``: ``--collect``
- ``common.py``: the suites and commands, the README's markers, labels, the committed-file readers
"""
