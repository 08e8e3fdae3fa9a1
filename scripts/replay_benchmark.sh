#!/usr/bin/env bash
# The recorded-table benchmark of one graph, end to end and resumable (issue 22):
#   record the table (continues its journal) -> report it (docs/benchmarks/tables/<graph>/) -> replay the named
#   grids (kgtuner.bench.benchmark.STUDIES) into docs/benchmarks/replay/<graph>/<study>/ -> regenerate the page.
# Every step continues where it stopped, so the same command after a kill or in a later session goes on; the
# replays start only once the table is complete. A recording is begun once, by hand, with its pilot and settings
# (docs/benchmarks/tables/README.md); this script continues it with the settings in its journal. Usage, from the
# repository root:
#   nohup nice -n 10 scripts/replay_benchmark.sh codex-m >> outputs/replay_benchmark_codex-m.log 2>&1 &
# Environment (defaults in brackets): DATASET [$DATA/<graph>, DATA ../shared/datasets], JOURNALS
# [outputs/bench_tables], TABLES [docs/benchmarks/tables], REPLAY [docs/benchmarks/replay], PAGE
# [docs/benchmarks.md], JOBS (replay processes) [1], STUDIES ["main miss_bracket defaults"], GRID (replay
# options instead of --study, one grid named "custom", e.g. "--algorithms random --seeds 2") [unset], KGTUNER
# [.venv/bin/kgtuner].
set -euo pipefail
graph=${1:?usage: scripts/replay_benchmark.sh GRAPH   (codex-m or wn18rr)}
DATASET=${DATASET:-${DATA:-../shared/datasets}/$graph}
JOURNALS=${JOURNALS:-outputs/bench_tables}
TABLES=${TABLES:-docs/benchmarks/tables}
REPLAY=${REPLAY:-docs/benchmarks/replay}
PAGE=${PAGE:-docs/benchmarks.md}
JOBS=${JOBS:-1}
STUDIES=${STUDIES:-main miss_bracket defaults}
KGTUNER=${KGTUNER:-.venv/bin/kgtuner}
PY=$(dirname "$KGTUNER")/python
journal=$JOURNALS/$graph
table=$TABLES/$graph

echo "== $(date -u +%FT%TZ) record $graph"
mkdir -p "$journal"
"$KGTUNER" bench record --dataset "$DATASET" --out "$journal" >> "$journal/record.log" 2>&1
"$KGTUNER" bench report --journal "$journal" --out "$table"
if ! "$PY" - "$table/card.json" <<'EOF'
import json, sys
card = json.load(open(sys.argv[1]))
planned = sum(card["planned"].values())
print(f"{card['graph']}: {card['runs']} of {planned} planned runs recorded")
sys.exit(0 if card["runs"] >= planned else 1)
EOF
then
  echo "the table is not complete yet: rerun this script to continue recording"; exit 3
fi
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
echo "== $(date -u +%FT%TZ) page"
"$PY" scripts/benchmarks_page.py --page "$PAGE" --replay "$REPLAY" --tables "$TABLES"
