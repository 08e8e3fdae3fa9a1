"""The chaos soak's code, one module per part; its command line, and the user's documentation in its docstring, is
``scripts/ops/chaos.py`` beside this package (run ``python scripts/ops/chaos.py --help``), which imports it.

In the order of a soak:

- ``schedule.py``: the constants (the cluster's set-up, the search's overrides, the checks' tolerances, the driver's
  lines) and the seeded schedule of faults (``Fault``, ``Schedule``, ``plan_schedule``)
- ``cluster.py``: the processes: the two-node Ray cluster in its helper process (``TwoNodeCluster``) and the
  search's driver sessions (``Session``)
- ``soak.py``: the run (``Soak``): the set-up, the driver sessions, the faults injected (``Injected``), the history
  checks of the finished search, the clean-up
- ``history.py``: a finished run directory read for the checks (``load_history``: ``History``, ``TuneTrial``)
- ``checks.py``: the history checks, one a guarantee of docs/operations.md (``Check``, ``check_history``)
- ``report.py``: the output (``Tee``), its opening lines, the fault checks and the report of faults and checks

Its modules import each other as ``soak.<module>``: the entry puts ``scripts/ops`` on ``sys.path`` first.
"""
