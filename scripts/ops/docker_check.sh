#!/usr/bin/env bash
# Pre-release check of the Docker files (issue 24): builds docker/Dockerfile for real and runs what it built.
# Needs root (it may install Debian's docker.io, debootstrap and docker-compose, and start the engine), the
# package registries (Debian mirror, PyPI) and this checkout's .venv (`make setup`; scripts/ops/submit.sh runs from it).
#
#   make docker-check                                    # writes docs/docker/docker_check.txt as well
#   bash scripts/ops/docker_check.sh [--budget S] [--image TAG] [--log FILE] [--rm-image]
#
# Steps (each timed; a failed step is recorded, the steps that need it are skipped; the exit status is non-zero
# when any step failed):
#   engine   a Docker engine: the running one, else Debian's dockerd started here (overlay2, else vfs), left running
#   base     kgtuner-base:bookworm, made once and cached: debootstrap bookworm, Debian's python3 (3.11) in a venv
#            /opt/venv first on PATH, the host's CA bundle for pip (egress here goes through a TLS proxy)
#   build    docker build -f docker/Dockerfile --build-arg BASE_IMAGE=kgtuner-base:bookworm (host network for pip)
#   version  docker run --network=none IMAGE kgtuner --version
#   demo     docker run --network=none IMAGE kgtuner launch budget.seconds=S   (the demo search; best_config.yaml)
#   train    docker run --network=none IMAGE kgtuner train --config-dir RUN --config-name best_config
#   submit   a Ray head in a container (host network, dashboard on 127.0.0.1, token auth) and
#            scripts/ops/submit.sh --wait from the host, the demo with budget.seconds=S; the job must succeed
#   compose  docker-compose -f docker/compose.yaml config (the compose tool Debian ships)
# Options: --budget S (the demo searches' budget, default 30), --image TAG (default kgtuner:docker-check),
# --log FILE (also write this output to FILE), --rm-image (remove the image at the end; the base stays cached).
# Env: DEBIAN_MIRROR (default http://deb.debian.org/debian), KGTUNER_CA_BUNDLE (default
# /etc/ssl/certs/ca-certificates.crt), DOCKER_CHECK_DIR (step logs and runs, default /var/tmp/kgtuner-docker-check),
# DOCKER_CHECK_PORT (first of the head's four ports, default 28265), KGTUNER_LOCAL_PYTHON (the Python with Ray that
# runs scripts/ops/submit.sh, default .venv/bin/python).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
budget=30
image="kgtuner:docker-check"
base_image="kgtuner-base:bookworm"
log_file=""
rm_image=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --budget) budget="$2"; shift 2 ;;
    --image) image="$2"; shift 2 ;;
    --log) log_file="$2"; shift 2 ;;
    --rm-image) rm_image=1; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "docker_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$budget" =~ ^[1-9][0-9]*$ ]] || { echo "docker_check.sh: --budget must be a positive integer" >&2; exit 2; }
if [[ -n "$log_file" ]]; then
  mkdir -p "$(dirname "$log_file")"
  exec > >(tee "$log_file") 2>&1
fi

mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ca_bundle="${KGTUNER_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
work="${DOCKER_CHECK_DIR:-/var/tmp/kgtuner-docker-check}"
port0="${DOCKER_CHECK_PORT:-28265}"
dash_port=$port0 gcs_port=$((port0 + 1)) client_port=$((port0 + 2)) agent_port=$((port0 + 3))
head_name="kgtuner-docker-check-head"
host_python="${KGTUNER_LOCAL_PYTHON:-$repo/.venv/bin/python}"   # runs scripts/ops/submit.sh (and its ray CLI)
logs="$work/logs"
runs="$work/runs"
rm -rf "$logs" "$runs"
mkdir -p "$logs" "$runs"

DOCKER=(docker)
names=() results=() seconds=()
declare -A status=()
t_start=$(date +%s.%N)

say() { printf '%s\n' "$*"; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
# step NAME NEEDS FUNCTION: runs FUNCTION unless a step it NEEDS (comma-separated) did not pass.
step() {
  local name="$1" needs="$2" fn="$3" dep t0 rc
  for dep in ${needs//,/ }; do
    if [[ "${status[$dep]:-}" != PASS ]]; then
      say "== $name: SKIP ($dep did not pass)"; names+=("$name"); results+=(SKIP); seconds+=(0.0)
      status[$name]=SKIP; return
    fi
  done
  say "== $name"
  t0=$(date +%s.%N)
  "$fn"; rc=$?
  names+=("$name"); seconds+=("$(elapsed "$t0")")
  if [[ $rc -eq 0 ]]; then results+=(PASS); status[$name]=PASS; else results+=(FAIL); status[$name]=FAIL; fi
  say "-- $name: ${status[$name]} in ${seconds[-1]} s$([[ -s "$logs/$name.log" ]] && echo " (log: $logs/$name.log)")"
  say
}
# show LOG N: the last N lines of a step's log, indented.
show() { tail -n "$2" "$1" | sed 's/\x1b\[[0-9;]*m//g; s/^/   | /'; }
need_root() { [[ $(id -u) -eq 0 ]] || { say "needs root to $1"; return 1; }; }
apt_install() {  # apt_install PACKAGE...: Debian's packages, installed once
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  need_root "install ${missing[*]}" || return 1
  say "apt-get install ${missing[*]}"
  { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; } \
    >>"$logs/apt.log" 2>&1 || { show "$logs/apt.log" 20; return 1; }
}
dk() { DOCKER_BUILDKIT=1 "${DOCKER[@]}" "$@"; }
cleanup() { "${DOCKER[@]}" rm -f "$head_name" >/dev/null 2>&1 || true; }
trap cleanup EXIT

# A client that builds with BuildKit (docker/Dockerfile.dockerignore and the build's caching need it): the `docker`
# on PATH when it has buildx or predates Docker 23 (BuildKit built in), else Debian's /usr/bin/docker (20.10).
pick_client() {
  local c v
  for c in docker /usr/bin/docker; do
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" buildx version >/dev/null 2>&1; then DOCKER=("$c"); return 0; fi
    v="$("$c" version --format '{{.Client.Version}}' 2>/dev/null)"
    if [[ "${v%%.*}" =~ ^[0-9]+$ ]] && (( ${v%%.*} < 23 )); then DOCKER=("$c"); return 0; fi
  done
  return 1
}

step_engine() {
  if ! pick_client; then
    apt_install docker.io || return 1
    pick_client || { say "no docker client with BuildKit (buildx, or Debian's docker.io)"; return 1; }
  fi
  if "${DOCKER[@]}" info >/dev/null 2>&1; then
    say "engine already running"
  else
    apt_install docker.io || return 1
    need_root "start dockerd" || return 1
    # overlay2 shares layers; vfs (where overlay2 cannot run) copies every layer in full: several times the
    # image's size on disk.
    local driver i
    for driver in overlay2 vfs; do
      say "starting dockerd --storage-driver=$driver --iptables=false --bridge=none"
      setsid dockerd --storage-driver="$driver" --iptables=false --bridge=none >>"$logs/dockerd.log" 2>&1 </dev/null &
      local pid=$!
      for i in $(seq 60); do
        "${DOCKER[@]}" info >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 1
      done
      if "${DOCKER[@]}" info >/dev/null 2>&1; then
        say "dockerd (pid $pid) runs; it is left running (stop it with: kill $pid)"; break
      fi
      kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
      show "$logs/dockerd.log" 10
    done
    "${DOCKER[@]}" info >/dev/null 2>&1 || return 1
  fi
  say "client $(command -v "${DOCKER[0]}") $("${DOCKER[@]}" version --format '{{.Client.Version}}'), engine" \
      "$("${DOCKER[@]}" version --format '{{.Server.Version}}'), storage driver $("${DOCKER[@]}" info --format '{{.Driver}}')"
}

step_base() {
  if "${DOCKER[@]}" image inspect "$base_image" >/dev/null 2>&1; then
    say "$base_image cached (created $("${DOCKER[@]}" image inspect -f '{{.Created}}' "$base_image"))"
    return 0
  fi
  apt_install debootstrap || return 1
  need_root "debootstrap" || return 1
  local dir
  dir="$(mktemp -d /var/tmp/kgtuner-base.XXXXXX)" || return 1
  say "debootstrap --variant=minbase bookworm $mirror (python3, python3-venv, ca-certificates)"
  if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$dir/rootfs" "$mirror" \
      >"$logs/base.log" 2>&1; then
    show "$logs/base.log" 20; rm -rf "$dir"; return 1
  fi
  # Debian's Python in a venv, first on PATH: `python` and `pip` then work as in Ray's image (whose Python is a
  # conda env), and pip may install (Debian's own python3 is "externally managed"). The host's CA bundle lets pip
  # reach PyPI through this machine's TLS-intercepting egress proxy; it lives in this local base only, so
  # docker/Dockerfile stays as users build it.
  chroot "$dir/rootfs" python3 -m venv /opt/venv >>"$logs/base.log" 2>&1 || { show "$logs/base.log" 20; rm -rf "$dir"; return 1; }
  cp "$ca_bundle" "$dir/rootfs/etc/ssl/certs/ca-certificates.crt"
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$dir/rootfs/etc/pip.conf"
  rm -rf "$dir/rootfs/var/cache/apt/archives/"*.deb "$dir/rootfs/var/lib/apt/lists/"*
  tar -C "$dir/rootfs" -c . | "${DOCKER[@]}" import \
      --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' --change 'CMD ["bash"]' - "$base_image" >>"$logs/base.log" 2>&1
  local rc=$?
  rm -rf "$dir"
  [[ $rc -eq 0 ]] || { show "$logs/base.log" 10; return 1; }
  "${DOCKER[@]}" run --rm --network=none "$base_image" bash -c 'id; python --version; pip --version'
}

step_build() {
  say "docker build --network=host -f docker/Dockerfile --build-arg BASE_IMAGE=$base_image -t $image ."
  dk build --network=host --progress=plain -f "$repo/docker/Dockerfile" --build-arg "BASE_IMAGE=$base_image" \
      -t "$image" "$repo" >"$logs/build.log" 2>&1
  local rc=$?
  # Each build step with its outcome and time, then the build's own checks (kgtuner --version; Ray, Python and
  # torch versions; the config tree inside the installed wheel).
  awk '/^#[0-9]+ \[/ { if (!($1 in head)) { head[$1] = substr($0, length($1) + 2); order[++n] = $1 } next }
       /^#[0-9]+ (DONE|CACHED|ERROR)/ { state[$1] = $2 (NF > 2 ? " " $3 : "") }
       END { for (i = 1; i <= n; i++) printf "   | %-12s %s\n", state[order[i]], substr(head[order[i]], 1, 110) }' \
    "$logs/build.log"
  grep -E '^#[0-9]+ [0-9.]+ (kgtuner [0-9]|checked:)' "$logs/build.log" | sed 's/^/   | /'
  if [[ $rc -ne 0 ]]; then show "$logs/build.log" 25; else show "$logs/build.log" 2; fi
  return $rc
}

step_version() {
  dk run --rm --network=none "$image" kgtuner --version 2>&1 | tee "$logs/version.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || return 1
  dk run --rm --network=none "$image" bash -c \
    'echo "user $(id -un) ($(id -u)), HOME=$HOME, cwd $(pwd)"; python -c "import sys, ray, torch, kgtuner.paths as p; \
print(sys.executable, sys.version.split()[0], \"ray\", ray.__version__, \"torch\", torch.__version__); print(\"configs:\", p.CONF_DIR)"' \
    2>&1 | tee -a "$logs/version.log"
}

step_demo() {
  # The container runs as uid 1000 (ray): give it the mounted run folder.
  mkdir -p "$runs/outputs" && chown 1000:100 "$runs/outputs"
  say "docker run --network=none $image kgtuner launch budget.seconds=$budget hydra.run.dir=outputs/demo"
  timeout $((budget + 600)) "${DOCKER[@]}" run --rm --network=none --shm-size=2g \
      -v "$runs/outputs:/home/ray/kgtuner/outputs" "$image" \
      kgtuner launch "budget.seconds=$budget" hydra.run.dir=outputs/demo >"$logs/demo.log" 2>&1
  local rc=$?
  sed 's/\x1b\[[0-9;]*m//g' "$logs/demo.log" \
    | grep -E '^\[kgtuner\] (the answer|outputs in)|^budget:|^stage [12]:|^best configuration' \
    | awk '!seen[$0]++' | sed 's/^/   | /'
  [[ $rc -eq 0 ]] || { show "$logs/demo.log" 25; return 1; }
  for f in best_config.yaml summary.json trials.parquet; do
    [[ -s "$runs/outputs/demo/$f" ]] || { say "missing outputs/demo/$f"; return 1; }
  done
  say "best_config.yaml:"; sed 's/^/   | /' "$runs/outputs/demo/best_config.yaml"
}

step_train() {
  say "docker run --network=none $image kgtuner train --config-dir outputs/demo --config-name best_config"
  timeout 900 "${DOCKER[@]}" run --rm --network=none --shm-size=2g \
      -v "$runs/outputs:/home/ray/kgtuner/outputs" "$image" \
      kgtuner train --config-dir outputs/demo --config-name best_config hydra.run.dir=outputs/train \
      >"$logs/train.log" 2>&1
  local rc=$?
  show "$logs/train.log" 8
  [[ $rc -eq 0 ]] || return 1
  [[ -s "$runs/outputs/train/metrics.json" ]] || { say "missing outputs/train/metrics.json"; return 1; }
  # The retrained answer against the model the search kept (the same configuration and seed).
  python3 -c 'import json, sys
new, kept = (json.load(open(f))["test"]["mrr"] for f in sys.argv[1:])
print(f"test MRR: retrained {new:.4f}, the search kept {kept:.4f}")' \
    "$runs/outputs/train/metrics.json" "$runs/outputs/demo/metrics.json" || true
}

step_submit() {
  [[ -x "$host_python" ]] || { say "no $host_python: run make setup first"; return 1; }
  local cluster_python token="" code i sid
  cluster_python="$("${DOCKER[@]}" run --rm --network=none "$image" python -c 'import sys; print(sys.executable)')" || return 1
  cleanup
  say "docker run -d --network=host $image: ray start --head, dashboard 127.0.0.1:$dash_port, token auth"
  "${DOCKER[@]}" run -d --name "$head_name" --network=host --shm-size=2g -e RAY_AUTH_MODE=token "$image" bash -c \
    "ray get-auth-token --generate >/dev/null && ray start --head --port=$gcs_port --ray-client-server-port=$client_port \
     --dashboard-host=127.0.0.1 --dashboard-port=$dash_port --dashboard-agent-listen-port=$agent_port \
     --num-gpus=0 --disable-usage-stats --block" >/dev/null || return 1
  for i in $(seq 120); do
    [[ -z "$token" ]] && token="$("${DOCKER[@]}" exec "$head_name" cat /home/ray/.ray/auth_token 2>/dev/null)"
    if [[ -n "$token" ]]; then
      code="$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "http://127.0.0.1:$dash_port/api/jobs/")"
      [[ "$code" == 200 ]] && break
    fi
    sleep 1
  done
  "${DOCKER[@]}" logs "$head_name" >"$logs/submit-head.log" 2>&1
  [[ "$code" == 200 ]] || { say "the head's Jobs API did not answer (HTTP $code)"; show "$logs/submit-head.log" 20; return 1; }
  code="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$dash_port/api/jobs/")"
  say "head up after ${i} s; Jobs API without the token: HTTP $code, with it: HTTP 200"
  sid="kgtuner-docker-check-$(date -u +%Y%m%d-%H%M%S)"
  say "RAY_AUTH_TOKEN=... scripts/ops/submit.sh --address http://127.0.0.1:$dash_port --python $cluster_python" \
      "--submission-id $sid --wait -- budget.seconds=$budget"
  KGTUNER_LOCAL_PYTHON="$host_python" RAY_AUTH_TOKEN="$token" timeout $((budget + 600)) bash "$repo/scripts/ops/submit.sh" --address "http://127.0.0.1:$dash_port" \
      --python "$cluster_python" --submission-id "$sid" --wait -- "budget.seconds=$budget" >"$logs/submit.log" 2>&1
  local rc=$?
  sed 's/\x1b\[[0-9;]*m//g' "$logs/submit.log" \
    | grep -E "^Submitting|^\[kgtuner\] (the answer|outputs in)|^stage [12]:|^best configuration|Job '.*' (succeeded|failed)" \
    | awk '!seen[$0]++' | sed 's/^/   | /'
  [[ $rc -eq 0 ]] || { show "$logs/submit.log" 25; return 1; }
  # The job's status as the head reports it.
  local st
  st="$(KGTUNER_SID="$sid" KGTUNER_ADDR="http://127.0.0.1:$dash_port" RAY_AUTH_MODE=token RAY_AUTH_TOKEN="$token" "$host_python" -c '
import os
from ray.job_submission import JobSubmissionClient
print(JobSubmissionClient(os.environ["KGTUNER_ADDR"]).get_job_status(os.environ["KGTUNER_SID"]))' 2>>"$logs/submit.log")"
  say "job status from the head: $st"
  [[ "$st" == *SUCCEEDED* ]] || return 1
  "${DOCKER[@]}" exec "$head_name" bash -c "ls ~/kgtuner-runs/$sid && test -s ~/kgtuner-runs/$sid/best_config.yaml" \
    | tr '\n' ' ' | sed 's/^/   | run dir on the head: /'
  local ok=${PIPESTATUS[0]}; say; return "$ok"
}

step_compose() {
  apt_install docker-compose || return 1
  say "$(docker-compose version --short 2>/dev/null || docker-compose --version): docker-compose -f docker/compose.yaml config"
  docker-compose -f "$repo/docker/compose.yaml" config >"$logs/compose.log" 2>&1
  local rc=$?
  sed 's/^/   | /' "$logs/compose.log"
  return $rc
}

say "kgtuner docker check, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
say "host: $(uname -srm), $(nproc) CPUs, $(. /etc/os-release && echo "$PRETTY_NAME")"
say "commit: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
say "work tree (git status --short):"
git -C "$repo" status --short 2>/dev/null | sed 's/^/   /'
say "image: $image on $base_image; demo budget: $budget s; logs: $logs"
say

step engine "" step_engine
step base engine step_base
step build base step_build
step version build step_version
step demo build step_demo
step train demo step_train
step submit build step_submit
step compose "" step_compose
cleanup

say "== summary"
printf '%-8s  %-4s  %8s\n' step result seconds
fail=0
for i in "${!names[@]}"; do
  printf '%-8s  %-4s  %8s\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}"
  [[ "${results[$i]}" == PASS ]] || fail=1
done
printf '%-8s  %-4s  %8s\n' total "$([[ $fail -eq 0 ]] && echo PASS || echo FAIL)" "$(elapsed "$t_start")"
if [[ "${status[build]:-}" == PASS ]]; then
  size="$("${DOCKER[@]}" image inspect -f '{{.Size}}' "$image")"
  bsize="$("${DOCKER[@]}" image inspect -f '{{.Size}}' "$base_image")"
  awk -v s="$size" -v b="$bsize" -v i="$image" -v bi="$base_image" 'BEGIN {
    printf "image %s: %.2f GB (%.2f GB over its base %s, %.2f GB)\n", i, s / 1e9, (s - b) / 1e9, bi, b / 1e9 }'
  if [[ $rm_image -eq 1 ]]; then "${DOCKER[@]}" rmi "$image" >/dev/null && say "removed $image (--rm-image)"; fi
fi
exit $fail
