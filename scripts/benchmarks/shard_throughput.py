"""What recording in shards (`kgtuner bench record --shard k/n`) bought on a journal: per session, its runs, the
runs' own seconds and the wall-clock hours they took; and how much slower a step ran beside another process
(each answers'-seed run against the seed-0 run of its configuration and shape, recorded earlier).

    .venv/bin/python scripts/benchmarks/shard_throughput.py outputs/bench_tables_converged/codex-m
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from kgtuner.bench.journal import Journal
from kgtuner.bench.pool import parse_run_id, run_id


def main(folder: str) -> None:
    records = Journal(Path(folder) / "journal.jsonl").read()
    sessions = {r["started_unix"]: r for r in records if r.get("kind") == "session"}
    rows = {r["run_id"]: r for r in records if r.get("kind") == "run"}
    answers = [r for r in rows.values() if r.get("phase") == "answers"]
    by_session = defaultdict(list)
    for r in answers:
        by_session[r["session_unix"]].append(r)
    print("session (UTC)  shard  runs  run-hours  wall-hours  (answers' seeds only)")
    for start, runs in sorted(by_session.items()):
        wall = max(r["ended_unix"] for r in runs) - start
        print(f"{time.strftime('%m-%d %H:%M', time.gmtime(start))}    {sessions[start].get('shard') or '-':5} "
              f"{len(runs):5d} {sum(r['seconds_total'] for r in runs) / 3600:10.2f} {wall / 3600:11.2f}")
    for name, sharded in (("in shards", True), ("one process", False)):
        ratios = []
        for r in answers:
            base = rows.get(run_id(*parse_run_id(r["run_id"])[:4], seed=0))
            if bool(sessions[r["session_unix"]].get("shard")) == sharded and base and base["steps"] and r["steps"]:
                ratios.append((r["seconds_train"] / r["steps"]) / (base["seconds_train"] / base["steps"]))
        if ratios:
            ratios.sort()
            print(f"{name}: {len(ratios)} runs; training seconds per step over their seed-0 run's: median "
                  f"{statistics.median(ratios):.3f} (5-95%: {ratios[int(0.05 * len(ratios))]:.3f}-"
                  f"{ratios[max(0, int(0.95 * len(ratios)) - 1)]:.3f})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "outputs/bench_tables_converged/codex-m")
