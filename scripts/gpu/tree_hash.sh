#!/usr/bin/env bash
# The content hash of the source tree (issue 39): sha256 over the sorted paths and contents of kgtuner/, conf/,
# scripts/, tests/, docker/, pyproject.toml, setup.py and Makefile, without git (the device machine gets a copy of
# the working tree). The GPU check writes it to env/tree-hash.txt; the same command on a checkout tells whether a
# check ran on exactly that tree:  bash scripts/gpu/tree_hash.sh [ROOT]
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
find kgtuner conf scripts tests docker pyproject.toml setup.py Makefile -type f \
  ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' -print0 2>/dev/null \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
