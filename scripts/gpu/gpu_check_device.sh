#!/usr/bin/env bash
# One device call for issue 23: install the carried wheels (Ray 2.60 slimmed, ogb, hydra; the device image has torch),
# run scripts/gpu/gpu_check.sh, and pack what it wrote into at most 8 files under $OUT (the device tool returns no more).
set -uo pipefail
mkdir -p /tmp/site
tar -xJf .whl/ray-slim.tar.xz -C /tmp/site && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site
python3 -c "import ray, ogb, hydra, torch; print(\"ray\", ray.__version__, \"torch\", torch.__version__, \"cuda\", torch.cuda.is_available())"
res=/tmp/gpu_check
PYTHON=python3 bash scripts/gpu/gpu_check.sh --out "$res" --limit "${LIMIT:-420}" 2>&1 | tee "$OUT/console.log"
rc=${PIPESTATUS[0]}
cp "$res/summary.txt" "$res/summary.json" "$OUT/" 2>/dev/null
cp "$res/engine/engine.log" "$res/models/models.log" "$res/packing/packing.json" "$OUT/" 2>/dev/null
tar -czf "$OUT/gpu_check.tar.gz" --exclude=embeddings.npz -C "$res" .
ls -la "$OUT"
echo "gpu_check.sh exit status $rc"

