"""``python -m kgtuner.bench``: the same as ``kgtuner bench``."""

import sys

from kgtuner.bench.cli import main

sys.exit(main(prog="python -m kgtuner.bench"))
