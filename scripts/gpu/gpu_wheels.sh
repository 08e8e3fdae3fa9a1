#!/usr/bin/env bash
# Build .whl/: what a lent GPU machine lacks to run scripts/gpu/gpu_check.sh (its image has torch, numpy,
# pandas, pyarrow, scikit-learn, grpcio, ... for CPython 3.12, but not Ray, ogb or hydra), small enough to
# travel with the checkout (64 MiB in all). scripts/gpu/gpu_check_device.sh installs it there.
#   bash scripts/gpu/gpu_wheels.sh      # needs pip access to the package index; about 4 minutes (xz)
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
rm -rf .whl && mkdir .whl
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform manylinux1_x86_64)
tmp="$(mktemp -d)"
# Ray: its 79 MB wheel, unpacked, without the Java jars, RLlib, Serve, the LLM package and source maps,
# repacked with xz (30 MB)
python3 -m pip download -q --no-deps "${plat[@]}" -d "$tmp" ray==2.60.0
mkdir "$tmp/ray" && (cd "$tmp/ray" && unzip -q "$tmp"/ray-2.60.0-*.whl)
rm -rf "$tmp/ray/ray/jars" "$tmp/ray/ray/rllib" "$tmp/ray/ray/serve" "$tmp/ray/ray/llm" \
       "$tmp"/ray/ray/dashboard/client/build/static/js/*.map
tar -C "$tmp/ray" -cJf .whl/ray-slim.tar.xz .
# the rest of ray[tune,default], ogb and hydra that the image lacks (or has too old for Ray 2.60)
python3 -m pip download -q --no-deps "${plat[@]}" -d .whl \
  aiohttp==3.14.5 aiohttp_cors aiosignal aiohappyeyeballs frozenlist multidict propcache "yarl>=1.25.1" \
  annotated_types colorful google_api_core google_auth googleapis_common_protos jsonschema \
  jsonschema_specifications littleutils ogb==1.3.6 opencensus opencensus_context opentelemetry_api \
  opentelemetry_exporter_prometheus opentelemetry_proto opentelemetry_sdk opentelemetry_semantic_conventions \
  outdated proto_plus protobuf pyasn1 pyasn1_modules "pydantic>=2.5,<3" pydantic_core referencing rpds_py \
  smart_open tensorboardx typing_inspection "typing_extensions>=4.16" cryptography cffi pycparser \
  hydra-core==1.3.8 omegaconf==2.3.1
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3   # a source distribution only
rm -rf "$tmp"
du -sh .whl
