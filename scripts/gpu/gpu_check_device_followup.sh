#!/usr/bin/env bash
# Second device call of issue 23, after gpu_check.sh's first GPU run (docs/gpu/run1): where the row step's
# time goes (scripts/gpu/profile_gpu_step.py), the model table the first run's engine step had no time for
# (bench_gpu.py --models all with fewer steps), and the out-of-memory step alone with room to finish.
set -uo pipefail
if ! python3 -c "import ray, ogb, hydra" 2>/dev/null; then
  mkdir -p /tmp/site
  tar -xJf .whl/ray-slim.tar.xz -C /tmp/site && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
fi
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 KGTUNER_CACHE=/tmp/kgcache
res=/tmp/followup; mkdir -p "$res"
timeout 100 python3 scripts/gpu/profile_gpu_step.py --out "$OUT" > "$OUT/profile.log" 2>&1; echo "profile rc=$?"
timeout 120 python3 scripts/gpu/bench_gpu.py --models all --steps 40 > "$OUT/engine_models.log" 2>&1; echo "bench rc=$?"
timeout 40 python3 scripts/data/make_ogb_biokg.py "$res/ogb" --entities 5000 --train-triples 200000 --eval-triples 2000 --candidates 500 > "$res/data.log" 2>&1; echo "data rc=$?"
timeout 100 python3 scripts/gpu/gpu_check_oom.py --ogb-root "$res/ogb" --out "$res/oom" --device cuda --steps 100 > "$OUT/oom.log" 2>&1; echo "oom rc=$?"
cp "$res/oom/oom.json" "$OUT/" 2>/dev/null
ls -la "$OUT"
