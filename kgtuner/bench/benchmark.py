"""The replay benchmark: every (algorithm, workers, budget, seed) cell replayed on a recorded table, resumably.

Settings are fixed before the runs (:class:`BenchmarkSettings`, written to the results' journal header); a
restart skips the cells already in the journal (one JSON line per replayed search, appended as it ends) and
refuses a journal recorded with other settings. Budgets are compute, in mean full-graph trials (the mean cost of
the table's ``full`` pool's main runs: priced on a priced table, measured seconds on an older one), so "30 trials'
worth" means the same on every graph and for every worker count (:func:`budget_seconds`: the wall-clock budget is
that compute divided by the workers).

Algorithms are the strategies' names (``search=<name>``): KGTuner, KGTuner+ASHA, and the one-stage RF+BORE,
TPE and random. GraSH is left out: its rounds train on subgraphs of other sizes for shares of the epochs,
fidelities a table of 20%-subgraph and full-graph runs does not hold. An algorithm may carry settings,
``name[key=value,...]`` (:func:`parse_algorithm`): ``kgtuner[top_k=5]`` is ``search=kgtuner search.top_k=5``,
and ``kgtuner[on_miss=lose]`` replays KGTuner with the replay's ``on_miss=lose``. ``space=decoupled`` (one-stage
searches only: ``random[space=decoupled]``, ``rf_bore[space=decoupled]``, ``tpe[space=decoupled]``) replays the
search over KGTuner's own space on the table's ``decoupled`` pool (a table without one refuses it). The named
grids (:data:`STUDIES`) are fixed here, in the code, before any replay of a recorded table.

A results row (:func:`run_cell`) keeps the mapping's ``misses`` and ``repeats`` (a cell with repeats ran out of
its pool: :func:`kgtuner.bench.compare.mark_exhausted`), the answer's drawn train seed (``answer_seed``) and its
configuration's recorded seeds (``answer_seeds``, ``"0,1,2"``); on a priced table the answer's ``test_mrr`` is the
mean over those seeds (``test_mrr_drawn`` the drawn one's: :mod:`kgtuner.bench.answer_score`, which
``kgtuner bench replay`` applies again to every row it writes); :func:`results_frame` adds ``searcher_share``,
the searcher's own computing seconds over the simulated budget.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from kgtuner.bench.pool import ON_MISS
from kgtuner.errors import ConfigError, KGTunerError

ALGORITHMS = ("kgtuner", "kgtuner_asha", "rf_bore", "tpe", "random")
#: ``name[space=...]``: the spaces a one-stage search can be replayed over besides its own (the table's pool of it).
SPACES = ("decoupled",)
#: The searches whose trials a table of 20%-subgraph and full-graph runs cannot replay, and why.
LEFT_OUT = {"grash": "its rounds train on subgraphs of other sizes for shares of the epochs; the table holds "
                     "20%-subgraph and full-graph runs only"}


_SPEC = re.compile(r"^([a-z_]+)(?:\[([^\[\]]*)\])?$")


def parse_algorithm(spec: str) -> tuple[str, list[str], str | None]:
    """``name`` or ``name[key=value,...]`` -> (the strategy's name, its ``search.<key>=<value>`` overrides, the
    replay's ``on_miss`` or None). Keys are those of ``conf/search/<name>.yaml`` (dotted for nested ones,
    ``searcher.batch``), or ``on_miss``."""
    text = re.sub(r"\s+", "", str(spec))
    m = _SPEC.match(text)
    head = re.match(r"^[a-z_]+", text)
    if not m and head and head.group(0) in ALGORITHMS:
        raise ConfigError(f"algorithm {spec!r}: write its settings as {head.group(0)}[key=value,...], with no "
                          "brackets or commas inside a value")
    if not m or m.group(1) not in ALGORITHMS:
        name = m.group(1) if m else str(spec)
        why = f" ({LEFT_OUT[name]})" if name in LEFT_OUT else ""
        raise ConfigError(f"algorithm {spec!r} cannot be replayed{why}; write one of {', '.join(ALGORITHMS)}, "
                          "optionally with settings: kgtuner[top_k=5,stage1_fraction=0.3]")
    overrides, on_miss = [], None
    for item in filter(None, (x.strip() for x in (m.group(2) or "").split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise ConfigError(f"algorithm {spec!r}: {item!r} is not key=value")
        key, value = key.strip(), value.strip()
        if key == "on_miss":
            if value not in ON_MISS:
                raise ConfigError(f"algorithm {spec!r}: on_miss={value!r}; choose among {', '.join(ON_MISS)}")
            on_miss = value
        elif key == "space":  # kept among the settings (its label), taken out by algorithm_pool/strategy_for
            if m.group(1).startswith("kgtuner") or value not in SPACES:
                raise ConfigError(f"algorithm {spec!r}: space={value!r}; a one-stage search (random, tpe, rf_bore) "
                                  f"can be replayed over space={' or '.join(SPACES)} (KGTuner's own, on the table's "
                                  "decoupled pool)")
            overrides.append(f"search.space={value}")
        else:
            overrides.append(f"search.{key}={value}")
    return m.group(1), overrides, on_miss


def algorithm_pool(spec: str) -> str:
    """The table's pool ``spec`` replays on when it is a one-stage search: ``decoupled`` for ``name[space=decoupled]``,
    else ``full`` (a two-stage search's pools are its stages')."""
    for o in parse_algorithm(spec)[1]:
        if o.startswith("search.space="):
            return o.split("=", 1)[1]
    return "full"


def algorithm_label(spec: str, on_miss: str = "nearest") -> str:
    """The canonical name of a replayed algorithm (its results' ``algorithm``): ``name[key=value,...]`` with the
    keys sorted and no spaces, ``on_miss`` included for a two-stage search replayed with other than
    ``nearest`` (one-stage searches have no stage-2 candidates to miss); a bare name without settings."""
    name, overrides, own = parse_algorithm(spec)
    items = sorted(o[len("search."):] for o in overrides)
    miss = own or on_miss
    if name.startswith("kgtuner") and miss != "nearest":
        items = sorted(items + [f"on_miss={miss}"])
    return f"{name}[{','.join(items)}]" if items else name


@dataclass(frozen=True)
class BenchmarkSettings:
    """The grid of a replay benchmark on one table (all fixed before the first replay)."""

    algorithms: tuple[str, ...] = ALGORITHMS
    workers: tuple[int, ...] = (1, 8)
    budgets: tuple[float, ...] = (10.0, 30.0, 100.0)  # in mean full-graph trials
    seeds: int = 30
    on_miss: str = "nearest"
    #: the searcher's CPU seconds delay the trials it starts, as in a live driver (:func:`kgtuner.bench.replay.replay`)
    charge_searcher: bool = False

    def __post_init__(self):
        labels = [algorithm_label(a, self.on_miss) for a in self.algorithms]
        if len(set(labels)) != len(labels):
            raise ConfigError(f"algorithms {list(self.algorithms)} name one twice ({', '.join(labels)})")
        if self.seeds < 1 or any(w < 1 for w in self.workers) or any(b <= 0 for b in self.budgets):
            raise ConfigError("seeds and workers must be >= 1 and budgets > 0")

    def to_dict(self) -> dict:
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
        if not out["charge_searcher"]:  # the journals of grids fixed before the setting existed keep their header
            del out["charge_searcher"]
        return out

    def cells(self) -> list[tuple[str, int, float, int]]:
        """(algorithm, workers, budget in trials, seed), seeds outermost so that a partial run has whole pairs."""
        return [(a, w, b, s) for s in range(self.seeds) for w in self.workers for b in self.budgets
                for a in self.algorithms]


#: The named grids of ``kgtuner bench replay --study NAME``, fixed before any replay of a recorded table.
#: ``main``: the issue's comparison. ``miss_bracket``: KGTuner with its misses lost instead of replaced by the
#: nearest expansion, at the budgets where a search's top-k can fall outside the recorded expansions (the two
#: mappings lean either way, bracketing the truth approximately). ``defaults``: part 4's design questions at 8
#: workers, each variant changing one setting of ``conf/search/kgtuner.yaml`` (stage-1 share 0.5, top_k 10,
#: Thompson draws in stage 1, the warm stage-2 forest), decided on codex-m and confirmed on WN18RR. ``stage2``
#: (issue 37, part 4): KGTuner as it is now (the first stage-2 round covers every top configuration, the forest from
#: the third stage-1 trial, cut stage-1 trials as lower bounds) against the forest's plain argmax in stage 2 on that
#: same stage 1 (``stage2_searcher.cover=false``, the stage 2 before issue 37), against ``stage2_start=ordered``, and
#: against the first round at each configuration's cheapest expansion (``stage2_searcher.cover_sizes=cheapest``,
#: part 2's stage 2 that fits a small budget); 1 and 8 workers, every budget, 30 paired seeds; decided by
#: :func:`kgtuner.bench.compare.variant_verdicts` on codex-m, confirmed on WN18RR (a variant replaces the default
#: only where it wins on both). ``rf_bore_now``: one-stage RF+BORE under the same change of its warm-up (the forest
#: from the third trial), the rival KGTuner's cells are judged against with random search and TPE of ``main``
#: (whose code the change left as it was). ``fair`` (issue 38, on the priced tables): ``main``'s algorithms, the miss
#: bracket at every budget (``kgtuner[on_miss=lose]``, ``kgtuner_asha[on_miss=lose]``), and the one-stage arms over
#: KGTuner's own space on the decoupled pool (``random[space=decoupled]``, ``rf_bore[space=decoupled]``), which
#: separate what the subgraph stage buys from what the narrower space buys.
STUDIES = {
    "main": BenchmarkSettings(),
    "miss_bracket": BenchmarkSettings(algorithms=("kgtuner[on_miss=lose]", "kgtuner_asha[on_miss=lose]"),
                                      budgets=(10.0, 30.0)),
    "defaults": BenchmarkSettings(
        algorithms=("kgtuner", "kgtuner[stage1_fraction=0.3]", "kgtuner[stage1_fraction=0.7]", "kgtuner[top_k=5]",
                    "kgtuner[top_k=20]", "kgtuner[searcher.batch=none]", "kgtuner[stage2_start=ordered]"),
        workers=(8,)),
    "stage2": BenchmarkSettings(
        algorithms=("kgtuner", "kgtuner[stage2_searcher.cover=false]", "kgtuner[stage2_start=ordered]",
                    "kgtuner[stage2_searcher.cover_sizes=cheapest]")),
    "rf_bore_now": BenchmarkSettings(algorithms=("rf_bore",)),
    "fair": BenchmarkSettings(algorithms=ALGORITHMS + ("kgtuner[on_miss=lose]", "kgtuner_asha[on_miss=lose]",
                                                       "random[space=decoupled]", "rf_bore[space=decoupled]"),
                              workers=(1, 8), budgets=(10.0, 30.0, 100.0), seeds=30, charge_searcher=True),
}


def mean_trial_seconds(table) -> float:
    """The mean cost of the table's full-graph (``full`` pool) main runs: the budgets' unit. On a priced table
    (``table.priced``) their priced cost, so the unit does not move with the recording machine's speed; on an
    older one their measured seconds."""
    secs = [r.total_s for r in table.runs["full"].values()]
    if not secs:
        raise ConfigError(f"{table.source or table.graph}: the table has no full-graph runs to size budgets by")
    return float(np.mean(secs))


def budget_seconds(table, budget_trials: float, workers: int) -> float:
    """The wall-clock budget of ``budget_trials`` mean full-graph trials of compute on ``workers`` workers: the
    same compute for every worker count (1 worker: ``budget_trials`` x the mean trial; 8 workers: an eighth of
    that on the clock), so 1 and 8 workers compare parallelism at equal cost, and the searches stay within the
    table's pools (8 workers on one budget's clock would run 8 times the stage-1 trials the pool holds)."""
    return float(budget_trials) * mean_trial_seconds(table) / int(workers)


def table_controls(table) -> dict[str, dict[str, int]]:
    """Per pool, the validation interval and the longest recorded run in steps: the trial controls a replay's
    strategy is given (ASHA's rungs are in steps of them)."""
    out = {}
    for pool, runs in table.runs.items():
        steps = [r.step for r in runs.values() if len(r.step)]
        if not steps:
            continue
        every = table.valid_every.get(pool)
        if not every:  # the most common first validation step (a run's last one may be off the grid)
            firsts = [int(s[0]) for s in steps]
            every = max(set(firsts), key=firsts.count)
        out[pool] = {"valid_every": int(every), "max_steps": int(max(int(s[-1]) for s in steps))}
    return out


def strategy_for(algorithm: str, table, budget_s: float, seed: int):
    """The strategy of ``search=<algorithm>`` for a replay on ``table``: the composed launcher config with the
    space the table's pool was drawn from (KGTuner: its stage-1 space; the one-stage searches: its full space),
    the budget in seconds, the seed, and the table's trial controls (stage 1: its ``stage1`` pool; stage 2 and
    the one-stage searches: its full-graph pools)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from kgtuner.paths import CONF_DIR
    from kgtuner.tune.settings import ExperimentSettings

    from kgtuner.bench.replay import check_pool

    name, search_overrides, _ = parse_algorithm(algorithm)
    staged = name.startswith("kgtuner")
    pool = algorithm_pool(algorithm)
    if not staged:
        try:
            check_pool(table, pool)  # a decoupled arm needs the table's decoupled pool
        except ConfigError as exc:
            raise ConfigError(f"algorithm {algorithm!r}: {exc}") from None
    search_overrides = [o for o in search_overrides if not o.startswith("search.space=")]
    ctl = table_controls(table)
    s1 = ctl.get("stage1", {})
    s2 = ctl.get("expand") if staged else ctl.get(pool)
    s2 = s2 or ctl.get("full") or ctl.get("expand") or {}
    # the space its pool is of (the decoupled arm: the stage-1 space, searched at the expansion's sizes by the replay)
    space = table.space_names["stage1" if staged or pool == "decoupled" else "full"]
    overrides = [f"search={name}", f"model={table.model}", f"space={space}", f"budget.seconds={budget_s!r}",
                 "budget.trials=null", f"seed={int(seed)}", "cluster.num_cpus=1"]
    for stage, c in (("stage1", s1), ("stage2", s2)):
        if c:
            overrides += [f"trial.{stage}.valid_every={c['valid_every']}", f"trial.{stage}.max_steps={c['max_steps']}"]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides + search_overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(f"algorithm {algorithm!r}: {str(exc).splitlines()[0]} (its keys are those of "
                          f"conf/search/{name}.yaml)") from None
    return ExperimentSettings.from_config(cfg).make_strategy()


def run_cell(table, algorithm: str, workers: int, budget_trials: float, seed: int, on_miss: str = "nearest",
             charge_searcher: bool = False) -> dict:
    """Replay one search; its row of ``results.parquet`` (with its anytime curve as JSON)."""
    from kgtuner.bench.answer_score import score_by_seeds
    from kgtuner.bench.replay import replay

    budget_s = budget_seconds(table, budget_trials, workers)
    strategy = strategy_for(algorithm, table, budget_s, seed)
    label = algorithm_label(algorithm, on_miss)
    on_miss = parse_algorithm(algorithm)[2] or on_miss
    pool = "full" if strategy.two_stage else algorithm_pool(algorithm)
    t0 = time.perf_counter()
    res = replay(strategy, table, workers=int(workers), on_miss=on_miss, pool=pool, charge_searcher=charge_searcher)
    wall = time.perf_counter() - t0
    ans = res.answer or {}
    if ans and int(ans.get("stage") or 0) != int(strategy.answer_stage()):
        # no trial of the answer's stage (stage 2's full graph) has a result: the fallback to stage 1's best is a
        # subgraph figure, not an answer's MRR (compare scores such a search NO_ANSWER_MRR)
        ans = {**ans, "valid_mrr": None, "test_mrr": None}
    rows = res.rows
    row = {"graph": table.graph, "algorithm": label, "on_miss": on_miss, "workers": int(workers),
            "budget_trials": float(budget_trials),
            "budget_s": budget_s, "seed": int(seed), "valid_mrr": ans.get("valid_mrr"), "test_mrr": ans.get("test_mrr"),
            "answer_stage": ans.get("stage"), "answer_run": ans.get("run_id"),
            "answer_seed": ans.get("run_seed"), "answer_seeds": ans.get("run_seeds"),
            "answer_test_is_valid_proxy": bool(ans.get("test_is_valid_proxy", False)), "trials": len(rows),
            "trials_stage2": sum(1 for r in rows if int(r["stage"]) == 2),
            "stopped": sum(1 for r in rows if r["status"] == "stopped" and r.get("rung") is not None),
            "failed": sum(1 for r in rows if r["status"] == "failed"), "misses": res.misses, "repeats": res.repeats,
            "mean_distance": res.mean_distance, "end_s": res.end_s, "searcher_s": round(res.searcher_s, 4),
            "searcher_charged": bool(charge_searcher), "wall_s": round(wall, 3),
            # a point names the run that scores it on a priced table (older tables' points stay as they were)
            "anytime_json": json.dumps([[round(t, 3), v, te, *([run] if table.priced else [])]
                                        for t, v, te, run in res.anytime])}
    return score_by_seeds([row], table)[0]


def check_cells(table, cells: Iterable[tuple[str, int, float, int]]) -> None:
    """Build the strategy of every (algorithm, workers, budget) of ``cells`` (as :func:`run_cell` does, seed 0),
    so that a setting no strategy takes (``kgtuner[top_k=-3]``) is refused before anything is written: a
    ConfigError naming the algorithm."""
    seen = set()
    for algorithm, workers, budget_trials, _ in cells:
        key = (algorithm, int(workers), float(budget_trials))
        if key in seen:
            continue
        seen.add(key)
        try:
            strategy_for(algorithm, table, budget_seconds(table, budget_trials, workers), 0)
        except ConfigError as exc:
            text = str(exc)
            if text.startswith(f"algorithm {algorithm!r}"):
                raise
            raise ConfigError(f"algorithm {algorithm!r}: {text}") from None


class ResultsJournal:
    """``journal.jsonl`` of a benchmark: a header (the settings and the table), then one line per replayed
    search, each appended and flushed to disk as it ends."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def read(self) -> tuple[dict | None, list[dict]]:
        """(header, result rows); ConfigError naming the file and line when a line (other than a last one cut by a
        kill) is not a JSON record."""
        if not self.path.is_file():
            return None, []
        try:
            lines = self.path.read_text().splitlines()
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self.path} cannot be read ({type(exc).__name__}: {exc}); move the journal away to "
                              "start the benchmark again") from None
        header, rows = None, []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                if n == len(lines):
                    break  # a line cut short by a kill: dropped, the cell is replayed again
                raise ConfigError(f"{self.path}:{n} is not JSON; move the journal away to start the benchmark again")
            if not isinstance(rec, dict) or (rec.get("kind") == "result" and not isinstance(rec.get("row"), dict)):
                raise ConfigError(f"{self.path}:{n} is not a record of a replay journal; move the journal away to "
                                  "start the benchmark again")
            if rec.get("kind") == "header":
                header = rec
            elif rec.get("kind") == "result":
                rows.append(rec["row"])
        return header, rows

    def append(self, record: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(record, default=_plain) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)


def _miss_twin(row: Mapping) -> dict | None:
    """The row of the same two-stage search replayed with the other ``on_miss`` (``nearest`` <-> ``lose``) when
    that replay is the same search: it had no miss (``on_miss`` acts only on a stage-2 candidate whose expansion
    the table lacks, counted in ``misses`` when the trial starts), so every trial, result and answer is the same.
    None otherwise (a miss, a one-stage search, ``fail``)."""
    miss = row.get("on_miss")
    if (miss not in ("nearest", "lose") or row.get("misses") is None or int(row["misses"]) != 0
            or not str(row["algorithm"]).startswith("kgtuner")):
        return None
    name, overrides, _ = parse_algorithm(row["algorithm"])
    items = sorted(o[len("search."):] for o in overrides)
    other = "lose" if miss == "nearest" else "nearest"
    label = algorithm_label(f"{name}[{','.join(items)}]" if items else name, other)
    return {**row, "algorithm": label, "on_miss": other}


def reusable_rows(table, journals: Iterable[str | Path]) -> dict[tuple, dict]:
    """Rows of other grids' journals this grid would replay again, by cell: a replay is deterministic, so a cell
    (algorithm, workers, budget, seed) replayed on the same table with the same budget unit gives the same row
    (``kgtuner`` at 8 workers is in ``main`` and in ``defaults``), and a two-stage search without a miss gives the
    row of its cell with the other ``on_miss`` too (``miss_bracket``'s, :func:`_miss_twin`). Journals of another
    graph or table, or of another mean trial, give none."""
    unit = mean_trial_seconds(table)
    out: dict[tuple, dict] = {}
    for path in journals:
        try:
            found = _journal_cells(path, table, unit)
        except (KGTunerError, OSError, ValueError, TypeError, KeyError) as exc:
            # another grid's journal: it cannot stop this replay (only this replay's own journal can refuse it)
            reason = (str(exc).strip().splitlines() or [""])[0]
            print(f"kgtuner: warning: sibling journal {path} skipped, its results are not reused (it cannot be "
                  f"read: {type(exc).__name__}: {reason})", file=sys.stderr, flush=True)
            continue
        for cell, row in found.items():
            out.setdefault(cell, row)
    return out


def _journal_cells(path: str | Path, table, unit: float) -> dict[tuple, dict]:
    """The rows of one journal by cell, with their miss twins (none when it is of another table or budget unit)."""
    header, rows = ResultsJournal(path).read()
    out: dict[tuple, dict] = {}
    if (not header or header.get("graph") != table.graph or header.get("table") != str(table.source)
            or not np.isclose(float(header.get("mean_trial_s") or -1), unit, rtol=0, atol=1e-9)
            or (header.get("settings") or {}).get("charge_searcher", False)):
        return out
    for r in rows:  # the label names every setting, on_miss included where it matters
        for row in (r, _miss_twin(r)):
            if row is not None:
                out.setdefault((row["algorithm"], int(row["workers"]), float(row["budget_trials"]),
                                int(row["seed"])), row)
    return out


def run_benchmark(table, settings: BenchmarkSettings, journal_path: str | Path, *, progress=None,
                  jobs: int = 1, reuse: Iterable[str | Path] = ()) -> list[dict]:
    """Replay every cell of ``settings`` on ``table`` not yet in the journal; all rows (old and new).
    ``jobs`` > 1 replays cells in that many processes (each cell is independent). ``reuse``: other grids'
    journals; a cell one of them already replayed on this table is copied from it (:func:`reusable_rows`)."""
    from kgtuner.bench.record import Journal

    journal = ResultsJournal(journal_path)
    Journal(journal.path).repair()  # a last line cut short by a kill (no newline) is cut: that cell is replayed again
    header, rows = journal.read()
    want = {"kind": "header", "settings": settings.to_dict(), "graph": table.graph, "table": str(table.source),
            "mean_trial_s": mean_trial_seconds(table)}
    if header is not None and \
            {k: header.get(k) for k in ("settings", "graph")} != {k: want[k] for k in ("settings", "graph")}:
        raise ConfigError(f"{journal.path} was recorded with other settings ({header.get('settings')}, graph "
                          f"{header.get('graph')}); fix the settings before the runs, or write to another --out")
    done = {(r["algorithm"], r["workers"], r["budget_trials"], r["seed"]) for r in rows}
    todo = [c for c in settings.cells() if (algorithm_label(c[0], settings.on_miss), c[1], float(c[2]), c[3])
            not in done]
    check_cells(table, todo)  # a refused setting writes nothing: the corrected command runs into the same folder
    if header is None:
        journal.append(want)
    total, finished = len(settings.cells()), len(settings.cells()) - len(todo)

    def record(row):
        nonlocal finished
        journal.append({"kind": "result", "row": row})
        rows.append(row)
        finished += 1
        if progress is not None:
            progress(finished, total, row)

    # a charged replay depends on the searcher's timing: it neither reuses nor is reused (reusable_rows)
    known = {} if settings.charge_searcher else \
        reusable_rows(table, [p for p in reuse if Path(p).resolve() != journal.path.resolve()])
    if known:
        left = []
        for c in todo:
            row = known.get((algorithm_label(c[0], settings.on_miss), c[1], float(c[2]), c[3]))
            if row is None:
                left.append(c)
            else:
                record(dict(row))
        todo = left
    if jobs <= 1:
        for a, w, b, s in todo:
            record(run_cell(table, a, w, b, s, settings.on_miss, settings.charge_searcher))
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(table.source,)) as pool:
            futures = [pool.submit(_run_in_worker, a, w, b, s, settings.on_miss, settings.charge_searcher)
                       for a, w, b, s in todo]
            for fut in as_completed(futures):
                record(fut.result())
    return rows


_WORKER_TABLE = None


def _init_worker(source: str) -> None:
    global _WORKER_TABLE
    from kgtuner.bench.replay import ReplayTable

    _WORKER_TABLE = ReplayTable.load(source)


def _run_in_worker(a, w, b, s, on_miss, charge_searcher=False):
    return run_cell(_WORKER_TABLE, a, w, b, s, on_miss, charge_searcher)


def results_frame(rows: Iterable[Mapping]):
    """The rows as a DataFrame (the columns of ``results.parquet``), one per search: a cell replayed by two grids
    (``kgtuner`` at 8 workers is in ``main`` and ``defaults``; a replay is deterministic) is kept once. Adds
    ``searcher_share``: the searcher's own computing seconds over the simulated budget (``searcher_s / budget_s``;
    derived here, not journaled, since it is a timing and two replays of one search differ in it)."""
    import pandas as pd

    df = pd.DataFrame(list(rows))
    keys = ["graph", "workers", "budget_trials", "algorithm", "seed"]
    charged = df["searcher_charged"].fillna(False).astype(bool) if "searcher_charged" in df else None
    if charged is not None and charged.any():  # a charged search is another search than its uncharged twin
        df["searcher_charged"] = charged
        keys.append("searcher_charged")
    else:  # no search charged its searcher: the columns stay those of the grids replayed before the setting
        df = df.drop(columns=["searcher_charged"], errors="ignore")
    dup = df[df.duplicated(keys, keep=False)]
    if len(dup):
        differ = dup.groupby(keys)[["valid_mrr", "test_mrr"]].nunique(dropna=False).max(axis=1) > 1
        if differ.any():
            first = differ[differ].index[0]
            raise ConfigError(f"two replays of {dict(zip(keys, first))} disagree (another table, or another "
                              "mapping?): compare results of one table, one folder per grid")
    df = df.drop_duplicates(keys).sort_values(keys, ignore_index=True)
    if {"searcher_s", "budget_s"} <= set(df.columns):
        df["searcher_share"] = df["searcher_s"].astype(float) / df["budget_s"].astype(float)
    return df
