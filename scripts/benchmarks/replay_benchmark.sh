#!/usr/bin/env bash
# The recorded-table benchmark of one graph, end to end and resumable (issue 22):
#   record the table (continues its journal) -> report it (docs/benchmarks/tables/<graph>/) -> replay the named
#   grids (kgtuner.bench.benchmark.STUDIES) into docs/benchmarks/replay/<graph>/<study>/ -> on a priced table (issue
#   38), record 3 seeds of every answer and score each answer by the mean over them (no replay again: the answers'
#   seeds are never drawn by a trial; kgtuner.bench.answer_score) -> regenerate the page.
# Every step continues where it stopped, so the same command after a kill or in a later session goes on (on a
# machine without the journal, it is first rebuilt from the committed table: `kgtuner bench restore`); the
# replays start only once the table is complete. A recording is begun once, by hand, with its pilot and settings
# (docs/benchmarks/tables/README.md); this script continues it with the settings in its journal. Usage, from the
# repository root:
#   nohup nice -n 10 scripts/benchmarks/replay_benchmark.sh codex-m >> outputs/replay_benchmark_codex-m.log 2>&1 &
# Environment (defaults in brackets): DATASET [$DATA/<graph>, DATA ../shared/datasets], JOURNALS
# [outputs/bench_tables], TABLES [docs/benchmarks/tables], REPLAY [docs/benchmarks/replay], PAGE
# [docs/benchmarks.md], README (its benchmark block is regenerated with the page) [README.md], JOBS (replay
# processes) [1], SHARDS (recording processes side by side, one torch thread each: `record --shard k/SHARDS`) [1], STUDIES [fair; the superseded tables were replayed with "main defaults miss_bracket"], GRID
# (replay options instead of --study, one grid named "custom", e.g. "--algorithms random --seeds 2") [unset],
# KGTUNER [.venv/bin/kgtuner]. Issue 38's journals are in outputs/bench_tables_converged: give JOURNALS.
set -euo pipefail
graph=${1:?usage: scripts/benchmarks/replay_benchmark.sh GRAPH   (codex-m or wn18rr)}
DATASET=${DATASET:-${DATA:-../shared/datasets}/$graph}
JOURNALS=${JOURNALS:-outputs/bench_tables}
TABLES=${TABLES:-docs/benchmarks/tables}
REPLAY=${REPLAY:-docs/benchmarks/replay}
PAGE=${PAGE:-docs/benchmarks.md}
README=${README:-README.md}
JOBS=${JOBS:-1}
SHARDS=${SHARDS:-1}
STUDIES=${STUDIES:-fair}
KGTUNER=${KGTUNER:-.venv/bin/kgtuner}
PY=$(dirname "$KGTUNER")/python
journal=$JOURNALS/$graph
table=$TABLES/$graph

echo "== $(date -u +%FT%TZ) record $graph"
if [ ! -s "$journal/journal.jsonl" ] && [ -f "$table/card.json" ]; then
  # a new machine or a fresh checkout: the journal is rebuilt from the committed table, and recording goes on
  "$KGTUNER" bench restore --table "$table" --out "$journal"
elif [ -s "$journal/journal.jsonl" ]; then
  # a journal older than the committed table (recorded on, elsewhere) would train those runs again
  "$PY" - "$table" "$journal" <<'EOF' || exit 4
import sys
from kgtuner.bench.restore import missing_from_journal
extra = missing_from_journal(sys.argv[1], sys.argv[2])
if extra:
    print(f"{sys.argv[1]} holds {len(extra)} run(s) the journal in {sys.argv[2]} lacks (e.g. {extra[0]}): they were "
          f"recorded elsewhere. Move {sys.argv[2]}/journal.jsonl aside and rerun: the journal is then rebuilt "
          "from the table", file=sys.stderr)
    sys.exit(1)
EOF
fi
mkdir -p "$journal"
record() {  # one process, or SHARDS side by side on one journal; fails if any of them fails
  if [ "$SHARDS" -le 1 ]; then
    "$KGTUNER" bench record --dataset "$DATASET" --out "$journal" "$@" >> "$journal/record.log" 2>&1
    return
  fi
  local pids=() k status=0
  for k in $(seq 1 "$SHARDS"); do
    "$KGTUNER" bench record --dataset "$DATASET" --out "$journal" --shard "$k/$SHARDS" "$@" \
      >> "$journal/record.log" 2>&1 &
    pids+=($!)
    sleep 5  # one after the other: the first appends the answers record the others then read
  done
  for k in "${pids[@]}"; do wait "$k" || status=$?; done
  return "$status"
}
record
"$KGTUNER" bench report --journal "$journal" --out "$table"
page() {  # the page and README's summary are what the committed files render: regenerated with every report
  "$PY" scripts/benchmarks/benchmarks_page.py --page "$PAGE" --readme "$README" --replay "$REPLAY" --tables "$TABLES"
}
page
if ! "$PY" - "$table/card.json" <<'EOF'
import json, sys
card = json.load(open(sys.argv[1]))
planned, in_plan = sum(card["planned"].values()), card["runs"] - card.get("answer_runs", 0)
print(f"{card['graph']}: {in_plan} of {planned} planned runs recorded")
sys.exit(0 if in_plan >= planned else 1)
EOF
then
  echo "the table is not complete yet: rerun this script to continue recording"; exit 3
fi
replay_all() {  # the named grids, or the custom one; a complete journal replays nothing and rewrites its results
  if [ -n "${GRID:-}" ]; then
    echo "== $(date -u +%FT%TZ) replay $graph custom: $GRID"
    # shellcheck disable=SC2086 # GRID is a list of options
    "$KGTUNER" bench replay --table "$table" $GRID --out "$REPLAY/$graph/custom" --jobs "$JOBS"
  else
    for study in $STUDIES; do
      echo "== $(date -u +%FT%TZ) replay $graph $study"
      "$KGTUNER" bench replay --table "$table" --study "$study" --out "$REPLAY/$graph/$study" --jobs "$JOBS"
    done
  fi
}
replay_all
# a priced table (issue 38): every answer of the replays gets 3 recorded seeds (`record --answers`), then the
# replays' results are written again from their journals: the answers' seeds are never drawn by a trial, so no
# search changes and nothing is replayed; each answer is scored by the mean over its configuration's seeds, grown
if "$PY" -c "import json,sys; sys.exit(0 if json.load(open('$table/card.json'))['settings'].get('cost') == 'calibrated' else 1)"; then
  echo "== $(date -u +%FT%TZ) answers' seeds"
  record --answers "$REPLAY/$graph"/*/results.parquet
  "$KGTUNER" bench report --journal "$journal" --out "$table"
  echo "== $(date -u +%FT%TZ) answers scored by their seeds"
  replay_all
fi
echo "== $(date -u +%FT%TZ) page"
page
