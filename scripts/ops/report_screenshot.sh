#!/usr/bin/env bash
# Pre-release check of report.html (issue 41, part 3) in a real browser: renders a search's report in headless
# Chromium and saves a screenshot to look at (plots drawn, no broken image). CI does not run a browser; it checks
# the HTML's content (tests/test_report.py).
#
#   bash scripts/ops/report_screenshot.sh                     # the demo search into a temporary run directory
#   bash scripts/ops/report_screenshot.sh RUN_DIR             # an existing search's run directory
#   bash scripts/ops/report_screenshot.sh [RUN_DIR] [--out PNG] [--html FILE]
#
# Steps: (1) without RUN_DIR, the demo search (python -m kgtuner.launch ... budget=trials budget.trials=12
# cluster.num_gpus=4, about 1-2 minutes on CPU); (2) python -m kgtuner.report RUN_DIR rebuilds RUN_DIR/report.html
# from the run directory's files; (3) chromium --headless --screenshot renders it at 1280 x HEIGHT (env, default 3300) with every network
# request sent to a dead proxy, so a resource the report would load from the network shows up broken.
# --out: the screenshot (default docs/images/demo_report.png); --html FILE: also copy report.html there.
# Needs Chromium: Debian's package (`sudo apt-get install -y chromium`), or CHROMIUM=/path/to/chrome.
# Env: KGTUNER_PYTHON (default .venv/bin/python of this checkout).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python="${KGTUNER_PYTHON:-$repo/.venv/bin/python}"
out="$repo/docs/images/demo_report.png"
html_copy=""
run_dir=""
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --html) html_copy="$2"; shift 2 ;;
        -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "report_screenshot: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) run_dir="$1"; shift ;;
    esac
done

browser="${CHROMIUM:-}"
if [ -z "$browser" ]; then
    for name in chromium chromium-browser google-chrome; do
        if command -v "$name" >/dev/null 2>&1; then browser="$(command -v "$name")"; break; fi
    done
fi
if [ -z "$browser" ]; then
    echo "report_screenshot: no Chromium found; install Debian's package: sudo apt-get install -y chromium" \
         "(or set CHROMIUM=/path/to/chrome)" >&2
    exit 2
fi
[ -x "$python" ] || { echo "report_screenshot: no Python at $python (make setup, or set KGTUNER_PYTHON)" >&2; exit 2; }

work="$(mktemp -d -t kgtuner-report-XXXXXX)"
trap 'rm -rf "$work"' EXIT
if [ -z "$run_dir" ]; then
    run_dir="$work/run"
    echo "== demo search into $run_dir (log: $work/launch.log)"
    (cd "$work" && "$python" -m kgtuner.launch cluster.include_dashboard=false budget=trials budget.trials=12 \
        cluster.num_gpus=4 "hydra.run.dir=$run_dir" >"$work/launch.log" 2>&1) \
        || { tail -20 "$work/launch.log" >&2; echo "report_screenshot: the demo search failed" >&2; exit 1; }
fi
run_dir="$(cd "$run_dir" && pwd)"

echo "== report: $("$python" -m kgtuner.report "$run_dir")"
report="$run_dir/report.html"

mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
rm -f "$out"
echo "== $browser --headless --screenshot=$out"
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$work/profile" \
    --proxy-server=127.0.0.1:9 --screenshot="$out" --window-size=1280,${HEIGHT:-3300} "file://$report" \
    >"$work/chromium.log" 2>&1 || true
if [ ! -s "$out" ]; then
    tail -20 "$work/chromium.log" >&2
    echo "report_screenshot: Chromium wrote no screenshot" >&2
    exit 1
fi
if [ -n "$html_copy" ]; then
    mkdir -p "$(dirname "$html_copy")"
    cp "$report" "$html_copy"
    echo "== report.html copied to $html_copy ($(wc -c <"$html_copy") bytes)"
fi
echo "== screenshot: $out ($(wc -c <"$out") bytes); look at it: the curve and the timeline drawn, no broken image"
