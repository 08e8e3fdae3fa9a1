#!/usr/bin/env bash
# Start (or stop) Prometheus and Grafana for the Ray cluster whose head runs on THIS machine, the way
# Ray documents it, plus a "kgtuner" Grafana dashboard of the ray_kgtuner_* series. Both listen on
# 127.0.0.1 only (reach them from elsewhere with an SSH tunnel, see docs/operations.md).
#
#   scripts/ops/metrics_stack.sh start     # Prometheus on 127.0.0.1:9090, Grafana on 127.0.0.1:3000 (if installed)
#   scripts/ops/metrics_stack.sh status
#   scripts/ops/metrics_stack.sh stop      # stops only what this script started (pid files)
#
# Uses `prometheus` / `grafana` (or `grafana-server`) from PATH. Without a prometheus binary it falls back
# to `ray metrics launch-prometheus` (which downloads Prometheus from GitHub and listens on all
# interfaces: the script says so). For the dashboard's Metrics tab to embed the panels, start the Ray
# head with RAY_PROMETHEUS_HOST=http://127.0.0.1:9090 RAY_GRAFANA_HOST=http://127.0.0.1:3000
# (and RAY_GRAFANA_IFRAME_HOST=http://127.0.0.1:3000 when the browser reaches Grafana via a tunnel).
# Env: RAY_TMPDIR (Ray's temp root, default /tmp), PROMETHEUS_PORT (9090), GRAFANA_PORT (3000),
#      GRAFANA_HOME (Grafana's homepath, default /usr/share/grafana), KGTUNER_METRICS_STATE (pid/log dir).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
ray_root="${RAY_TMPDIR:-/tmp}/ray"
session="$ray_root/session_latest"
state="${KGTUNER_METRICS_STATE:-$HOME/.cache/kgtuner/metrics-stack}"
prom_port="${PROMETHEUS_PORT:-9090}"
graf_port="${GRAFANA_PORT:-3000}"
python="${KGTUNER_LOCAL_PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then python="$repo/.venv/bin/python"; else python="python3"; fi
fi
ray_cli="$(dirname "$python")/ray"; [[ -x "$ray_cli" ]] || ray_cli="ray"

die() { echo "metrics_stack.sh: $*" >&2; exit 1; }
alive() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  [[ -d "$session/metrics" ]] || die "no Ray session with metrics under $ray_root (start the Ray head on this machine first, or set RAY_TMPDIR)"
  mkdir -p "$state"
  # Prometheus: scrapes every node listed in Ray's service-discovery file.
  local prom_cfg="$session/metrics/prometheus/prometheus.yml"
  if alive "$state/prometheus.pid"; then
    echo "Prometheus already running (pid $(cat "$state/prometheus.pid"))"
  elif command -v prometheus >/dev/null; then
    nohup prometheus --config.file="$prom_cfg" --web.listen-address="127.0.0.1:$prom_port" \
      --storage.tsdb.path="$state/prometheus-data" >"$state/prometheus.log" 2>&1 &
    echo $! >"$state/prometheus.pid"
    echo "Prometheus: http://127.0.0.1:$prom_port (pid $!, log $state/prometheus.log)"
  else
    echo "No prometheus binary on PATH: running 'ray metrics launch-prometheus' (downloads Prometheus;"
    echo "WARNING: it listens on all interfaces, port 9090 - firewall it or stop it when done)."
    "$ray_cli" metrics launch-prometheus
  fi
  # Grafana: Ray writes grafana.ini + provisioning (data source, Ray dashboards) for the session.
  local graf_bin=""
  if command -v grafana >/dev/null; then graf_bin="grafana server"; elif command -v grafana-server >/dev/null; then graf_bin="grafana-server"; fi
  if [[ -z "$graf_bin" ]]; then
    echo "No grafana on PATH: skipping Grafana (install it to get dashboards; Prometheus alone serves queries)."
    return 0
  fi
  local dash_dir="$session/metrics/grafana/dashboards"
  mkdir -p "$dash_dir"
  "$python" -m kgtuner.cluster.metrics >"$dash_dir/kgtuner_grafana_dashboard.json"
  if alive "$state/grafana.pid"; then
    echo "Grafana already running (pid $(cat "$state/grafana.pid"))"
  else
    GF_SERVER_HTTP_ADDR=127.0.0.1 GF_SERVER_HTTP_PORT="$graf_port" GF_PATHS_DATA="$state/grafana-data" \
      nohup $graf_bin --homepath "${GRAFANA_HOME:-/usr/share/grafana}" \
      --config "$session/metrics/grafana/grafana.ini" web >"$state/grafana.log" 2>&1 &
    echo $! >"$state/grafana.pid"
    echo "Grafana: http://127.0.0.1:$graf_port (pid $!, log $state/grafana.log; dashboards 'Ray' and 'kgtuner')"
  fi
}

stop() {
  local name
  for name in grafana prometheus; do
    if alive "$state/$name.pid"; then kill "$(cat "$state/$name.pid")" && echo "stopped $name"; fi
    rm -f "$state/$name.pid"
  done
  echo "(a Prometheus started by 'ray metrics launch-prometheus' stops with: ray metrics shutdown-prometheus)"
}

status() {
  local name
  for name in prometheus grafana; do
    if alive "$state/$name.pid"; then echo "$name: running (pid $(cat "$state/$name.pid"))"; else echo "$name: not running"; fi
  done
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown command '$1' (start | stop | status)" ;;
esac
