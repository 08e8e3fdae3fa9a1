#!/usr/bin/env bash
# Submit a kgtuner experiment to a Ray cluster as a Ray job (Jobs API, token authentication).
#
#   scripts/ops/submit.sh [options] [--] [hydra overrides ...]
#   scripts/ops/submit.sh -- +experiment=biokg_complex
#   scripts/ops/submit.sh --address http://127.0.0.1:8265 --run-dir '~/kgtuner-runs/biokg' -- +experiment=biokg_complex
#   scripts/ops/submit.sh --run-dir '~/kgtuner-runs/biokg' -- +experiment=biokg_complex resume=true   # continue
#
# Options (environment variables in brackets):
#   --address URL        dashboard / Jobs API of the head [RAY_API_SERVER_ADDRESS, else http://127.0.0.1:8265;
#                        for a remote head open an SSH tunnel first: ssh -L 8265:127.0.0.1:8265 HEAD]
#   --python PATH        interpreter ON THE CLUSTER that runs the driver [KGTUNER_CLUSTER_PYTHON, default
#                        /home/ray/anaconda3/bin/python, the one of Ray's images and docker/Dockerfile]
#   --run-dir DIR        Hydra run directory ON THE HEAD, where trials.parquet etc. are written
#                        [default ~/kgtuner-runs/<submission id>; a leading ~/ is the head's home];
#                        pass the same one again with resume=true to resume
#   --submission-id ID   job id [default kgtuner-<UTC time>]; stop with: ray job stop --address URL ID
#   --no-working-dir     do not upload this checkout; use the kgtuner installed on the cluster
#   --stop-wait S        seconds between `ray job stop` (SIGINT, a clean resumable stop) and a kill [60]
#   --wait               follow the job's logs until it ends (default: submit and return)
# The token: RAY_AUTH_TOKEN, or the file RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token (docs/operations.md).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
address="${RAY_API_SERVER_ADDRESS:-http://127.0.0.1:8265}"
cluster_python="${KGTUNER_CLUSTER_PYTHON:-/home/ray/anaconda3/bin/python}"
submission_id="kgtuner-$(date -u +%Y%m%d-%H%M%S)"
run_dir=""
upload=1
stop_wait=60
wait_flag="--no-wait"

usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --address) address="$2"; shift 2 ;;
    --python) cluster_python="$2"; shift 2 ;;
    --run-dir) run_dir="$2"; shift 2 ;;
    --submission-id) submission_id="$2"; shift 2 ;;
    --no-working-dir) upload=0; shift ;;
    --stop-wait) stop_wait="$2"; shift 2 ;;
    --wait) wait_flag=""; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "submit.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[[ "$stop_wait" =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: --stop-wait must be a positive integer, got '$stop_wait'" >&2; exit 2; }

# The local Python that runs the `ray` CLI (this checkout's venv when there is one).
local_python="${KGTUNER_LOCAL_PYTHON:-}"
if [[ -z "$local_python" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then local_python="$repo/.venv/bin/python"; else local_python="python3"; fi
fi

# runtime_env: kgtuner's worker env vars + a SIGINT stop (kgtuner.cluster.ray_cluster.runtime_env_for_job).
runtime_env="$(PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$local_python" -c '
import json, sys
from kgtuner.cluster.ray_cluster import runtime_env_for_job
print(json.dumps(runtime_env_for_job(stop_wait_s=int(sys.argv[1]))))' "$stop_wait")"

# The driver attaches to the cluster it runs on by itself (Ray sets RAY_ADDRESS for a job's driver).
# Hydra writes the run directory on the head: keep it out of the job's temporary working dir.
# (`ray job submit` shell-quotes each word; ${oc.env:HOME} is resolved by Hydra on the head.)
entry=("$cluster_python" -m kgtuner.launch "$@")
has_run_dir=0
for arg in "$@"; do [[ "$arg" == hydra.run.dir=* ]] && has_run_dir=1; done
if [[ $has_run_dir -eq 0 ]]; then
  [[ -n "$run_dir" ]] || run_dir='~/kgtuner-runs/'"$submission_id"
  [[ "$run_dir" == "~/"* ]] && run_dir='${oc.env:HOME}/'"${run_dir#\~/}"
  entry+=("hydra.run.dir=$run_dir")
fi

# `ray job submit` sends the token only when token mode is on in this process.
if [[ -z "${RAY_AUTH_MODE:-}" ]] && { [[ -n "${RAY_AUTH_TOKEN:-}" ]] || [[ -s "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}" ]]; }; then
  export RAY_AUTH_MODE=token
fi

ray_cli=("$(dirname "$local_python")/ray")
[[ -x "${ray_cli[0]}" ]] || ray_cli=(ray)
args=(job submit --address "$address" --submission-id "$submission_id" --runtime-env-json "$runtime_env")
[[ $upload -eq 1 ]] && args+=(--working-dir "$repo")
[[ -n "$wait_flag" ]] && args+=("$wait_flag")

echo "Submitting $submission_id to $address: ${entry[*]}"
"${ray_cli[@]}" "${args[@]}" -- "${entry[@]}"
echo "Follow:  ray job logs --address $address -f $submission_id"
echo "Stop:    ray job stop --address $address $submission_id   (SIGINT: Tune saves state; resume with the same --run-dir and resume=true)"
