"""``kgtuner bench``: record tables of real KGE training runs, for comparing search methods on the record.

    kgtuner bench pilot  --dataset D [--per-pool 4]   time a few runs per pool, estimate the recording's hours
    kgtuner bench record --dataset D [--out DIR]      record (or continue) the table: one journal line per run
    kgtuner bench report --journal DIR [--out DIR]    runs.parquet, curves.parquet, card.md from the journal
    kgtuner bench restore --table DIR [--out DIR]     rebuild a lost journal from its table (record continues it)
    kgtuner bench replay --table DIR [--seeds 30] ...  replay the real strategies on a table, on simulated time
    kgtuner bench compare --results DIR                the replay's figures: CIs, paired tests, ranks, curves

Every setting of a recording (``kgtuner.bench.pool.RecordSettings``) is an option (``--full-cap-s 90``);
the first ``record`` writes them into the journal's header, and a restart takes them from there (an
option that differs from the header is refused: settings are fixed before the first run). Run it in the
background, e.g. ``nohup nice -n 10 kgtuner bench record --dataset ../shared/datasets/codex-m >>
outputs/bench_tables/codex-m/record.log 2>&1 &``; the same command continues after a kill.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path

from kgtuner.cli import EXIT_INTERRUPTED, ArgumentParser, fail
from kgtuner.errors import KGTunerError

DEFAULT_TABLES = Path("docs") / "benchmarks" / "tables"
ALL_POOLS = "stage1,expand,full,decoupled"


def _answer_runs(paths, dataset: str) -> list[str]:
    """The answers' run ids in replay results (``answer_run``) of the graph named like ``dataset``'s folder."""
    from kgtuner.bench.table import read_frame

    graph = Path(str(dataset).rstrip("/")).name.lower()
    out: set[str] = set()
    for path in paths:
        frame = read_frame(path, need=("graph", "answer_run"))
        rows = frame[frame["graph"].astype(str).str.lower() == graph]
        out |= {str(r) for r in rows["answer_run"].dropna()}
    return sorted(out)


def _none_or_int(text: str) -> int | None:
    return None if str(text).lower() in ("none", "null") else int(text)


def _bool(text: str) -> bool:
    value = str(text).lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a truth value: write true or false")
    return value in ("true", "1", "yes")


_TYPES = {"int": int, "float": float, "str": str, "int | None": _none_or_int, "bool": _bool}


def _settings_options(parser: argparse.ArgumentParser) -> None:
    from kgtuner.bench.pool import RecordSettings

    group = parser.add_argument_group("recording settings (defaults: kgtuner.bench.pool.RecordSettings; "
                                      "patience and validation samples from conf/trial/<--trial>.yaml)")
    for f in dataclasses.fields(RecordSettings):
        if f.name == "dataset":
            continue
        default = f.default
        group.add_argument(f"--{f.name.replace('_', '-')}", dest=f"set_{f.name}", type=_TYPES[str(f.type)],
                           default=argparse.SUPPRESS, metavar=f.name.split("_")[-1].upper(),
                           help=f"(default {default})")


def _explicit(args) -> dict:
    return {k[4:]: v for k, v in vars(args).items() if k.startswith("set_")}  # only the options given


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(prog=prog, description=__doc__.splitlines()[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("pilot", "time a few runs per pool (out/pilot.jsonl) and print the estimated hours"),
                       ("record", "record or continue a table (out/journal.jsonl), one progress line per run")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--dataset", required=True, help="built-in name (demo) or a folder with train/valid/test")
        p.add_argument("--out", default=None, help="the journal's folder (default outputs/bench_tables/<dataset>)")
        if name == "pilot":
            p.add_argument("--per-pool", type=int, default=4, help="pilot runs per pool (default 4)")
            p.add_argument("--pools", default=ALL_POOLS, help="comma list of pools to pilot (default: all)")
        else:
            p.add_argument("--max-runs", type=int, default=None, help="stop after this many runs (default: all)")
            p.add_argument("--pools", default=ALL_POOLS, help="comma list of pools to record (default: all)")
            p.add_argument("--answers", nargs="*", default=[], metavar="RESULTS",
                           help="replay results (results.parquet): record every answer configuration of this graph "
                                "with the seeds its training noise needs (kgtuner.bench.pool.ANSWER_SEEDS)")
            p.add_argument("--shard", default=None, metavar="K/N",
                           help="record only the K-th of every N runs, so that N processes (--shard 1/N .. N/N) "
                                "record one journal side by side, one core each (default: every run)")
        _settings_options(p)
    for name in ("report", "finalize"):
        p = sub.add_parser(name, help="write runs.parquet, curves.parquet and card.md from a journal (any time)")
        p.add_argument("--journal", required=True, help="the journal's folder (or its journal.jsonl)")
        p.add_argument("--out", default=None, help="where to write (default docs/benchmarks/tables/<dataset>)")
    p = sub.add_parser("restore", help="rebuild a journal from its recorded table (runs.parquet, curves.parquet, "
                                       "card.json), so that `record` continues it on another machine")
    p.add_argument("--table", required=True, help="a recorded table's folder, written by `kgtuner bench report`")
    p.add_argument("--out", default=None, help="the journal's folder (default outputs/bench_tables/<graph>)")
    from kgtuner.bench.benchmark import ALGORITHMS, STUDIES

    p = sub.add_parser("replay", help="replay search strategies on a recorded table (resumable; results.parquet)")
    p.add_argument("--table", required=True, help="a recorded table's folder (runs.parquet, curves.parquet, card)")
    p.add_argument("--out", required=True, help="results folder: journal.jsonl, results.parquet, summary.txt, "
                                                "curves_<graph>.png")
    p.add_argument("--study", choices=sorted(STUDIES), default=None,
                   help="a named grid fixed in kgtuner.bench.benchmark.STUDIES (main: the default grid; defaults: "
                        "KGTuner's design questions at 8 workers; miss_bracket: KGTuner with its misses lost); "
                        "not with the grid options below")
    p.add_argument("--algorithms", nargs="+", default=None,
                   help=f"default: {' '.join(ALGORITHMS)}; with settings: 'kgtuner[top_k=5]', 'kgtuner[on_miss=lose]'")
    p.add_argument("--workers", nargs="+", type=int, default=None, help="simulated workers (default 1 8)")
    p.add_argument("--budgets", nargs="+", type=float, default=None,
                   help="compute budgets in mean full-graph trials of the table (default 10 30 100)")
    p.add_argument("--seeds", type=int, default=None, help="paired seeds per cell (default 30)")
    p.add_argument("--charge-searcher", action="store_const", const=True, default=None,
                   help="the searcher's CPU seconds delay the trials it starts, as in a live driver (study fair: on)")
    p.add_argument("--on-miss", choices=("nearest", "lose", "fail"), default=None,
                   help="a stage-2 candidate the table has no expansion of: its nearest recorded one (default), "
                        "lost (its seconds, no result), or an error")
    p.add_argument("--jobs", type=int, default=1, help="replay processes (default 1)")
    p.add_argument("--no-reuse", action="store_true",
                   help="replay every cell, even one a sibling grid's journal (OUT/../*/journal.jsonl) already "
                        "replayed on the same table, or a two-stage search it replayed without a miss under the "
                        "other --on-miss (by default such a cell is copied: a replay is deterministic)")
    p = sub.add_parser("compare", help="the figures of replayed searches (results.parquet of one or more folders)")
    p.add_argument("--results", nargs="+", required=True, help="results folders (or journal.jsonl files)")
    p.add_argument("--tables", nargs="*", default=[], help="the recorded tables, for the regret and the SRCC")
    p.add_argument("--out", default=None, help="write summary.txt, summary.parquet and results.parquet (every "
                                               "search of the folders, one row each) here (default: print only)")
    return parser


def _same_dataset(a: str, b: str) -> bool:
    """Whether two ``--dataset`` values name the same data: equal names, or the same folder however spelled
    (relative to the current directory or absolute)."""
    if str(a) == str(b):
        return True
    pa, pb = Path(str(a)).expanduser(), Path(str(b)).expanduser()
    return pa.is_dir() and pb.is_dir() and pa.resolve() == pb.resolve()


def settings_for(dataset: str, out: Path, explicit: dict):
    """The recording's settings: the journal header's when it exists (explicit options must agree), else
    the defaults with the trial preset's patience / validation samples, then the explicit options."""
    from kgtuner.bench.pool import RecordSettings, trial_defaults
    from kgtuner.bench.table import load_journal

    journal = out / "journal.jsonl"
    if journal.is_file() and journal.stat().st_size:
        header = load_journal(journal)[0]
        base = dict(header["settings"])
        if not _same_dataset(dataset, base["dataset"]):
            explicit = {**explicit, "dataset": dataset}
        return RecordSettings.from_header({**base, **explicit}), True
    base = {"dataset": dataset, **trial_defaults(explicit.get("trial", "paper"))}
    return RecordSettings.from_dict({**base, **explicit}), False


def main(argv: list[str] | None = None, prog: str = "kgtuner bench") -> int:
    args = _parser(prog).parse_args(argv)
    from kgtuner.cli import output_dir_problem

    problem = output_dir_problem(getattr(args, "out", None), "--out")  # an existing file: one line, before any work
    if problem:
        return fail(problem)
    try:
        if args.command in ("report", "finalize"):
            from kgtuner.bench.table import finalize, load_journal

            journal = Path(args.journal)
            out = Path(args.out) if args.out else DEFAULT_TABLES / load_journal(journal)[0]["dataset"]
            summary = finalize(journal if journal.is_dir() else journal.parent, out)
            print(f"{summary['runs']} run(s) -> {out}/runs.parquet, curves.parquet, card.md, card.json")
            return 0
        if args.command == "restore":
            from kgtuner.bench.record import default_out
            from kgtuner.bench.restore import restore_journal

            from kgtuner.bench.table import read_card

            table = Path(args.table)
            card = table / "card.json"
            graph = read_card(card).get("graph") if card.is_file() else None
            out = Path(args.out) if args.out else default_out(graph or table.resolve().name)
            done = restore_journal(table, out)
            print(f"{done['runs']} run(s), {done['sessions']} session(s) -> {done['journal']}"
                  + (" (header rebuilt from the card's facts)" if done["rebuilt_header"] else ""))
            return 0
        if args.command == "replay":
            return _replay(args)
        if args.command == "compare":
            return _compare(args)
        from kgtuner.bench import pilot as pilot_mod
        from kgtuner.bench import record as rec

        out = Path(args.out) if args.out else rec.default_out(args.dataset)
        settings, resumed = settings_for(args.dataset, out, _explicit(args))
        pools = [p.strip() for p in args.pools.split(",") if p.strip()]
        from kgtuner.bench.pool import POOLS

        bad = [p for p in pools if p not in POOLS]
        if bad:
            return fail(f"unknown pool(s) {bad}; choose among {', '.join(POOLS)}")
        if args.command == "pilot":
            est = pilot_mod.pilot(settings, out, per_pool=args.per_pool, pools=pools)
            print(json.dumps({k: v for k, v in est.items() if k != "settings"}, indent=1))
            return 0
        estimate = None
        if not resumed:
            estimate = _pilot_estimate(settings, out)
        command = " ".join([prog, *(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))])
        rec.record(settings, out, command=command, estimate=estimate, max_runs=args.max_runs,
                   pools=pools, log=lambda line: print(line, flush=True),
                   answers=_answer_runs(args.answers, args.dataset), shard=rec.parse_shard(args.shard))
        return 0
    except KGTunerError as exc:
        return fail(exc)
    except KeyboardInterrupt:
        print("interrupted: finished runs are in the journal; the same command continues", file=sys.stderr)
        return EXIT_INTERRUPTED


def _progress(done: int, total: int, row: dict, started: list) -> None:
    """One progress line per replayed search: a bar, the count, the cell and its answer, the time left."""
    import time

    now = time.monotonic()
    started.append(now)
    width = 30
    fill = int(width * done / max(total, 1))
    rate = (now - started[0]) / max(len(started) - 1, 1) if len(started) > 1 else 0.0
    left = rate * (total - done)
    test = row.get("test_mrr")
    print(f"[{'#' * fill}{'.' * (width - fill)}] {done}/{total} {row['algorithm']} w={row['workers']} "
          f"b={row['budget_trials']:g} seed={row['seed']}: test MRR "
          f"{'-' if test is None else f'{test:.4f}'} ({row['trials']} trials, {row['wall_s']:.1f}s)"
          + (f" | ~{left / 60:.0f} min left" if rate else ""), flush=True)


def _replay(args) -> int:
    """``kgtuner bench replay``: every cell replayed (resumable), then results.parquet, summary.txt, curves PNG."""
    from kgtuner.bench.answer_score import score_by_seeds
    from kgtuner.bench.benchmark import STUDIES, BenchmarkSettings, results_frame, run_benchmark
    from kgtuner.bench.compare import format_summary, plot_anytime, summarize, table_best_test
    from kgtuner.bench.replay import ReplayTable

    grid = {"algorithms": args.algorithms, "workers": args.workers, "budgets": args.budgets, "seeds": args.seeds,
            "on_miss": args.on_miss, "charge_searcher": args.charge_searcher}
    given = {k: v for k, v in grid.items() if v is not None}
    if args.study and given:
        return fail(f"--study {args.study} fixes the grid; drop --{' --'.join(k.replace('_', '-') for k in given)}, "
                    "or leave out --study")
    settings = STUDIES[args.study] if args.study else BenchmarkSettings(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})
    table = ReplayTable.load(args.table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started: list = []
    siblings = [] if args.no_reuse else sorted(out.resolve().parent.glob("*/journal.jsonl"))
    rows = run_benchmark(table, settings, out / "journal.jsonl", jobs=args.jobs, reuse=siblings,
                         progress=lambda d, t, r: _progress(d, t, r, started))
    # every answer scored from the table as it is now: seeds recorded for the answers since (`record --answers`)
    # enter the scores, and a complete journal is scored again without replaying anything
    df = results_frame(score_by_seeds(rows, table))
    df.to_parquet(out / "results.parquet", index=False)
    summary = summarize(df, table_best=table_best_test(table))
    text = format_summary(summary)
    (out / "summary.txt").write_text(f"# command: {' '.join(shlex.quote(a) for a in sys.argv)}\n{text}\n")
    plot_anytime(df, out / f"curves_{table.graph}.png")
    print(text)
    print(f"{len(df)} replayed searches -> {out}/results.parquet, summary.txt, curves_{table.graph}.png")
    return 0


def _compare(args) -> int:
    """``kgtuner bench compare``: the figures of one or more replay results folders together."""
    import pandas as pd

    from kgtuner.bench.answer_score import score_by_seeds
    from kgtuner.bench.benchmark import ResultsJournal, results_frame
    from kgtuner.bench.compare import format_summary, subgraph_srcc, summarize, table_best_test
    from kgtuner.bench.replay import ReplayTable

    rows = []
    for item in args.results:
        path = Path(item)
        journal = path if path.suffix == ".jsonl" else path / "journal.jsonl"
        if not journal.is_file():
            return fail(f"{journal} does not exist: give a folder written by `kgtuner bench replay`")
        rows += ResultsJournal(journal).read()[1]
    tables = {t.graph: t for t in (ReplayTable.load(x) for x in args.tables)}
    for table in tables.values():  # the answers of a graph whose table is given: scored from it as it is now
        rows = score_by_seeds(rows, table)
    unscored = sorted({str(r.get("graph")) for r in rows if "answer_score" in r and r.get("graph") not in tables})
    if unscored:
        print(f"kgtuner: warning: the answers of {', '.join(unscored)} keep the scores they had when replayed (a "
              "priced table's answer scores the mean over its seeds, which `record --answers` adds to): give "
              "--tables with the table to score them as it is now", file=sys.stderr, flush=True)
    df = results_frame(rows)
    parts = []
    for graph, g in df.groupby("graph"):
        best = table_best_test(tables[graph]) if graph in tables else None
        parts.append(summarize(g, table_best=best))
    summary = pd.concat(parts, ignore_index=True)
    text = format_summary(summary)
    for graph, t in tables.items():
        text += f"\n\nSRCC of subgraph and full-graph validation MRR on the {graph} pool (per stage-2 size):\n"
        text += "\n".join(f"  batch {r['batch_size']} dim {r['dim']}: {r['srcc']:+.3f} [95% bootstrap CI "
                           f"{r['ci_low']:+.2f}, {r['ci_high']:+.2f}] over {r['configs']} configurations (the top "
                           "of the stage-1 ranking)" for r in subgraph_srcc(t))
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        summary.to_parquet(out / "summary.parquet", index=False)
        df.drop(columns=["anytime_json"]).to_parquet(out / "results.parquet", index=False)
        (out / "summary.txt").write_text(f"# command: {' '.join(shlex.quote(a) for a in sys.argv)}\n{text}\n")
    return 0


def _pilot_estimate(settings, out: Path) -> dict | None:
    """The estimate of this folder's pilot runs recorded with exactly these settings (None without any)."""
    from kgtuner.bench.pool import Pools
    from kgtuner.bench.journal import Journal
    from kgtuner.bench.pilot import estimate

    rows = [r for r in Journal(out / "pilot.jsonl").read()
            if r.get("kind") == "run" and r.get("settings") == settings.to_dict()]
    if not rows:
        return None
    from kgtuner.data import load_dataset

    return estimate(settings, Pools(settings, load_dataset(settings.dataset).name), rows)


if __name__ == "__main__":
    sys.exit(main())
